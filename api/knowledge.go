package api

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/linefactory/linefactory/manifests"
	"github.com/linefactory/linefactory/store"
)

// Lengths of the knowledge text columns.
const (
	maxIdentifierLen = 128
	maxFormatLen     = 64
)

var (
	identifierRE    = regexp.MustCompile(`^[a-z0-9-]+$`)
	knowledgeTypes  = []string{"episodic", "procedural", "declarative", "prompt", "image", "video", "audio"}
	knowledgeLinkTs = []string{"repository", "tag"}
)

// KnowledgeVersionResponse is SPEC's knowledge version.
type KnowledgeVersionResponse struct {
	ID            string                `json:"id"`
	Identifier    string                `json:"identifier"`
	VersionNumber int                   `json:"version_number"`
	Type          string                `json:"type"`
	Level         string                `json:"level"`
	Format        string                `json:"format"`
	Body          string                `json:"body"`
	Metadata      map[string]any        `json:"metadata"`
	Links         []store.KnowledgeLink `json:"links"`
	ContentHash   string                `json:"content_hash"`
	CreatedAt     time.Time             `json:"created_at"`
	ByteSize      *int64                `json:"byte_size"`
}

// KnowledgeItemResponse is one item of GET /knowledge; GET of one item adds
// its latest version.
type KnowledgeItemResponse struct {
	Identifier          string                    `json:"identifier"`
	LatestVersionNumber int                       `json:"latest_version_number"`
	Type                string                    `json:"type"`
	CreatedAt           time.Time                 `json:"created_at"`
	LatestVersion       *KnowledgeVersionResponse `json:"latest_version,omitempty"`
}

type knowledgeRequest struct {
	Identifier *string               `json:"identifier"`
	Type       *string               `json:"type"`
	Level      *string               `json:"level"`
	Format     *string               `json:"format"`
	Body       *string               `json:"body"`
	Metadata   map[string]any        `json:"metadata"`
	Links      []store.KnowledgeLink `json:"links"`
}

func knowledgeResponse(v store.KnowledgeVersion) KnowledgeVersionResponse {
	size := v.ByteSize
	return KnowledgeVersionResponse{ID: v.ID, Identifier: v.Identifier, VersionNumber: v.VersionNumber, Type: v.Type, Level: v.Level,
		Format: v.Format, Body: v.Body, Metadata: v.Metadata, Links: v.Links, ContentHash: v.ContentHash, CreatedAt: v.CreatedAt.UTC(), ByteSize: &size}
}

func oneOf(s string, allowed []string) bool {
	for _, a := range allowed {
		if s == a {
			return true
		}
	}
	return false
}

// knowledgeVersion checks a request and builds the version it describes.
func knowledgeVersion(req knowledgeRequest, identifier string, withIdentifier bool) (store.KnowledgeVersion, error) {
	f := &fieldCheck{}
	switch {
	case withIdentifier:
		f.require(req.Identifier != nil, "identifier")
		if req.Identifier != nil {
			identifier = *req.Identifier
			switch {
			case len(identifier) > maxIdentifierLen:
				f.add("identifier", "string_too_long", fmt.Sprintf("identifier must be at most %d characters", maxIdentifierLen), identifier)
			case !identifierRE.MatchString(identifier):
				f.add("identifier", "string_pattern_mismatch", "identifier must be lowercase letters, digits and hyphens", identifier)
			}
		}
	case req.Identifier != nil && *req.Identifier != identifier:
		// The identifier is fixed at creation and named by the path; the
		// body may repeat it.
		f.add("identifier", "value_error", fmt.Sprintf("identifier %q differs from the path's %q", *req.Identifier, identifier), *req.Identifier)
	}
	f.require(req.Type != nil, "type")
	f.require(req.Level != nil, "level")
	f.require(req.Format != nil, "format")
	f.require(req.Body != nil, "body")
	if req.Type != nil && !oneOf(*req.Type, knowledgeTypes) {
		f.add("type", "enum", "type must be one of episodic, procedural, declarative, prompt, image, video, audio", *req.Type)
	}
	if req.Level != nil && !oneOf(*req.Level, knowledgeTypes) {
		f.add("level", "enum", "level must be one of episodic, procedural, declarative, prompt, image, video, audio", *req.Level)
	}
	if req.Format != nil && *req.Format == "" {
		f.add("format", "string_too_short", "format must not be empty", *req.Format)
	}
	if req.Format != nil && len(*req.Format) > maxFormatLen {
		f.add("format", "string_too_long", fmt.Sprintf("format must be at most %d characters", maxFormatLen), *req.Format)
	}
	for i, l := range req.Links {
		if !oneOf(l.LinkType, knowledgeLinkTs) {
			f.detail = append(f.detail, FieldError{Loc: []any{"body", "links", i, "link_type"}, Msg: "link_type must be repository or tag", Type: "enum", Input: l.LinkType})
		}
		if l.Value == "" {
			f.detail = append(f.detail, FieldError{Loc: []any{"body", "links", i, "value"}, Msg: "field required", Type: "missing"})
		}
	}
	if err := f.err(); err != nil {
		return store.KnowledgeVersion{}, err
	}
	v := store.KnowledgeVersion{Identifier: identifier, Type: *req.Type, Level: *req.Level, Format: *req.Format, Body: *req.Body,
		Metadata: req.Metadata, Links: req.Links, ByteSize: int64(len(*req.Body))}
	if v.Metadata == nil {
		v.Metadata = map[string]any{}
	}
	if v.Links == nil {
		v.Links = []store.KnowledgeLink{}
	}
	hash, err := manifests.ContentHash(map[string]any{"type": v.Type, "level": v.Level, "format": v.Format, "body": v.Body, "metadata": v.Metadata, "links": v.Links})
	if err != nil {
		return store.KnowledgeVersion{}, err
	}
	v.ContentHash = hash
	return v, nil
}

func (s *Server) createKnowledge(c *gin.Context) error {
	var req knowledgeRequest
	if err := bindJSON(c, &req); err != nil {
		return err
	}
	v, err := knowledgeVersion(req, "", true)
	if err != nil {
		return err
	}
	created, err := s.store.CreateKnowledge(c.Request.Context(), v)
	if errors.Is(err, store.ErrConflict) {
		return httpError(http.StatusConflict, CodeInvalidRequest, "knowledge item %q exists already; add a version with POST /knowledge/%s/versions", v.Identifier, v.Identifier)
	}
	if err != nil {
		return err
	}
	c.JSON(http.StatusCreated, knowledgeResponse(created))
	return nil
}

func (s *Server) addKnowledgeVersion(c *gin.Context) error {
	var req knowledgeRequest
	if err := bindJSON(c, &req); err != nil {
		return err
	}
	v, err := knowledgeVersion(req, c.Param("identifier"), false)
	if err != nil {
		return err
	}
	out, created, err := s.store.AddKnowledgeVersion(c.Request.Context(), v)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	c.JSON(status, knowledgeResponse(out))
	return nil
}

func (s *Server) listKnowledge(c *gin.Context) error {
	limit, offset, err := page(c)
	if err != nil {
		return err
	}
	items, err := s.store.ListKnowledge(c.Request.Context(), limit, offset)
	if err != nil {
		return err
	}
	out := make([]KnowledgeItemResponse, len(items))
	for i, it := range items {
		out[i] = KnowledgeItemResponse{Identifier: it.Identifier, LatestVersionNumber: it.LatestVersionNumber, Type: it.Type, CreatedAt: it.CreatedAt}
	}
	c.JSON(http.StatusOK, out)
	return nil
}

func (s *Server) getKnowledge(c *gin.Context) error {
	item, latest, err := s.store.GetKnowledge(c.Request.Context(), c.Param("identifier"))
	if err != nil {
		return err
	}
	v := knowledgeResponse(latest)
	c.JSON(http.StatusOK, KnowledgeItemResponse{Identifier: item.Identifier, LatestVersionNumber: item.LatestVersionNumber,
		Type: item.Type, CreatedAt: item.CreatedAt, LatestVersion: &v})
	return nil
}

func (s *Server) getKnowledgeVersion(c *gin.Context) error {
	n, err := strconv.Atoi(c.Param("version_number"))
	if err != nil || n < 1 {
		return invalid("int_parsing", "version_number must be a positive integer", "path", "version_number")
	}
	v, err := s.store.GetKnowledgeVersion(c.Request.Context(), c.Param("identifier"), n)
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, knowledgeResponse(v))
	return nil
}
