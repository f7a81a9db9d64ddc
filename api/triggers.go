package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/linefactory/linefactory/manifests"
	"github.com/linefactory/linefactory/store"
)

// Inbound triggers (API.md "Triggers"): a webhook path, or a provider event
// matched against integration triggers. The trigger envelope is
//
//	{"source", "provider", "event_name", "delivery_id", "path", "body": <request body>}
//
// and conditions and trigger_path bindings address it (e.g. "body.labels").
// It is the run's trigger payload; lists leave out its body.

// deployedLine is a line's current version with its decoded manifest.
type deployedLine struct {
	name     string
	version  store.LineVersion
	manifest manifests.LineManifest
}

// currentLines loads the current version of every line.
func (s *Server) currentLines(ctx context.Context) ([]deployedLine, error) {
	var out []deployedLine
	for offset := 0; ; offset += MaxLimit {
		lines, err := s.store.ListLines(ctx, MaxLimit, offset)
		if err != nil {
			return nil, err
		}
		for _, l := range lines {
			v, err := s.store.LatestLineVersion(ctx, l.Name)
			if err != nil {
				continue
			}
			var m manifests.LineManifest
			if err := json.Unmarshal(v.Manifest, &m); err != nil {
				return nil, err
			}
			out = append(out, deployedLine{name: l.Name, version: v, manifest: m})
		}
		if len(lines) < MaxLimit {
			return out, nil
		}
	}
}

// triggerBody reads a JSON request body (empty means {}): a JSON object,
// as every request body (null, a list or a scalar is 422), which
// conditions and bindings address as body.<key>.
func triggerBody(c *gin.Context) (any, []byte, error) {
	data, err := readBody(c)
	if err != nil {
		return nil, nil, err
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return map[string]any{}, data, nil
	}
	var body any
	if err := json.Unmarshal(data, &body); err != nil {
		return nil, nil, invalid("json_invalid", "the trigger payload must be JSON: "+err.Error(), "body")
	}
	if _, ok := body.(map[string]any); !ok {
		return nil, nil, invalid("model_type", "the body must be a JSON object", "body")
	}
	return body, data, nil
}

// maxDeliveryIDLen bounds X-Delivery-Id (the store indexes it).
const maxDeliveryIDLen = 255

func deliveryID(c *gin.Context) (string, error) {
	id := strings.TrimSpace(c.GetHeader("X-Delivery-Id"))
	if id == "" {
		return store.NewID("dlv_"), nil
	}
	if len(id) > maxDeliveryIDLen {
		return "", invalid("string_too_long", fmt.Sprintf("X-Delivery-Id must be at most %d bytes", maxDeliveryIDLen), "header", "X-Delivery-Id")
	}
	return id, nil
}

// answerStarted answers a trigger with the runs it started (202), or with
// the runs an earlier delivery of the same id started (200).
func (s *Server) answerStarted(c *gin.Context, status int, runs []store.LineRun) error {
	c.JSON(status, listOfViews(runs, lineRunListItem))
	return nil
}

func (s *Server) webhook(c *gin.Context) error {
	ctx := c.Request.Context()
	path := strings.Trim(c.Param("path"), "/")
	body, _, err := triggerBody(c)
	if err != nil {
		return err
	}
	delivery, err := deliveryID(c)
	if err != nil {
		return err
	}
	// A delivery id is scoped to its path: the same id sent to another
	// path is another delivery.
	d := delivered{source: "webhook", id: delivery, scope: func(r store.LineRun) bool {
		p, _ := r.Trigger.Payload["path"].(string)
		return p == path
	}}
	if repeated, err := s.answerRepeat(c, d); err != nil || repeated {
		return err
	}
	lines, err := s.currentLines(ctx)
	if err != nil {
		return err
	}
	event := strings.TrimSpace(c.GetHeader("X-Event-Name"))
	envelope := map[string]any{"source": "webhook", "path": path, "delivery_id": delivery, "event_name": nilIfEmpty(event), "body": body}
	trig := store.TriggerSummary{Source: "webhook", DeliveryID: &delivery, EventName: nonEmpty(event), Payload: envelope}
	var launches []lineLaunch
	for _, l := range lines {
		t := l.manifest.Trigger
		if t.Type == manifests.TriggerWebhook && strings.Trim(t.Path, "/") == path {
			launches = append(launches, lineLaunch{line: l, params: map[string]any{}})
		}
	}
	if len(launches) == 0 {
		return httpError(http.StatusNotFound, CodeNotFound, "no line listens on webhook path %q", path)
	}
	return s.startDelivery(c, d, trig, launches)
}

// delivered names a trigger delivery: its source, its id, and which of the
// runs recorded under that id belong to it (webhooks by path, integration
// events by provider).
type delivered struct {
	source, id string
	scope      func(store.LineRun) bool
}

// lineLaunch is one line a delivery starts, with the run params it gets.
type lineLaunch struct {
	line   deployedLine
	params map[string]any
}

// priorRuns returns the runs the delivery started before.
func (s *Server) priorRuns(ctx context.Context, d delivered) ([]store.LineRun, error) {
	all, err := s.store.FindLineRunsByDelivery(ctx, d.source, d.id)
	if err != nil {
		return nil, err
	}
	var out []store.LineRun
	for _, r := range all {
		if d.scope(r) {
			out = append(out, r)
		}
	}
	return out, nil
}

// answerRepeat answers 200 with the runs of a delivery seen before, and
// tells whether it did.
func (s *Server) answerRepeat(c *gin.Context, d delivered) (bool, error) {
	prior, err := s.priorRuns(c.Request.Context(), d)
	if err != nil || len(prior) == 0 {
		return false, err
	}
	return true, s.answerStarted(c, http.StatusOK, prior)
}

// startDelivery starts a run of every line of launches and answers 202 with
// them; runs that could not start are recorded failed and answered too. The
// store admits one run per line and delivery, so when a concurrent delivery
// of the same id got there first, this one stops (its losing run never
// reaches the engine) and answers 200 with that delivery's runs.
func (s *Server) startDelivery(c *gin.Context, d delivered, trig store.TriggerSummary, launches []lineLaunch) error {
	ctx := c.Request.Context()
	started := make([]store.LineRun, 0, len(launches))
	for _, l := range launches {
		run, err := s.launchLine(ctx, l.line.name, l.line.version, l.line.manifest, l.params, trig, c.GetString(actorKey))
		if errors.Is(err, store.ErrConflict) {
			prior, perr := s.priorRuns(ctx, d)
			if perr != nil {
				return perr
			}
			return s.answerStarted(c, http.StatusOK, prior)
		}
		if err != nil {
			return err
		}
		started = append(started, run)
	}
	return s.answerStarted(c, http.StatusAccepted, started)
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

var integrationProviders = map[string]bool{manifests.ProviderCodeHost: true, manifests.ProviderIssueTrackerA: true, manifests.ProviderChatTool: true}

func (s *Server) integrationEvent(c *gin.Context) error {
	ctx := c.Request.Context()
	provider := c.Param("provider")
	if !integrationProviders[provider] {
		return httpError(http.StatusNotFound, CodeNotFound, "unknown provider %q (code_host, issue_tracker_a, chat_tool)", provider)
	}
	body, raw, err := triggerBody(c)
	if err != nil {
		return err
	}
	if secret := s.cfg.IntegrationSecrets[provider]; secret != "" {
		if err := s.checkSignature(c, secret, raw); err != nil {
			return err
		}
	}
	delivery, err := deliveryID(c)
	if err != nil {
		return err
	}
	// A delivery id is scoped to its provider.
	d := delivered{source: "integration", id: delivery, scope: func(r store.LineRun) bool {
		return r.Trigger.Provider != nil && *r.Trigger.Provider == provider
	}}
	if repeated, err := s.answerRepeat(c, d); err != nil || repeated {
		return err
	}
	event := strings.TrimSpace(c.GetHeader("X-Event-Name"))
	envelope := map[string]any{"source": "integration", "provider": provider, "delivery_id": delivery, "event_name": nilIfEmpty(event), "body": body}
	lines, err := s.currentLines(ctx)
	if err != nil {
		return err
	}
	trig := store.TriggerSummary{Source: "integration", Provider: &provider, DeliveryID: &delivery, EventName: nonEmpty(event), Payload: envelope}
	var launches []lineLaunch
	for _, l := range lines {
		t := l.manifest.Trigger
		if t.Type != manifests.TriggerIntegration || t.Provider != provider || !selectorMatches(provider, t.Selector, body) {
			continue
		}
		ok, err := filtersMatch(t.Filters, envelope)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		params := map[string]any{}
		for _, name := range sortedMapKeys(t.Outputs) {
			if v, found := manifests.ResolvePath(envelope, t.Outputs[name].Path); found {
				params[name] = v
			}
		}
		launches = append(launches, lineLaunch{line: l, params: params})
	}
	if len(launches) == 0 {
		return httpError(http.StatusNotFound, CodeNotFound, "no line's %s trigger matches this event", provider)
	}
	return s.startDelivery(c, d, trig, launches)
}

func sortedMapKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	for i := 1; i < len(keys); i++ {
		for j := i; j > 0 && keys[j] < keys[j-1]; j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
		}
	}
	return keys
}

func filtersMatch(filters []manifests.Condition, envelope map[string]any) (bool, error) {
	for i, f := range filters {
		ok, err := manifests.Evaluate(f, manifests.EvalContext{Trigger: envelope})
		if err != nil {
			return false, fmt.Errorf("trigger.filters[%d]: %w", i, err)
		}
		if !ok {
			return false, nil
		}
	}
	return true, nil
}

// selectorMatches applies a selector with scope "selected" to the event's
// well-known fields: code_host repository (payload.repository.full_name or
// payload.repository), issue_tracker_a labels (payload.labels, strings or
// {name}), project (payload.project_id), state (payload.state) and team
// (payload.team_id), chat_tool channel (payload.channel). Scope "all" (or
// none) matches every event of the provider.
func selectorMatches(provider string, sel *manifests.Selector, body any) bool {
	if sel == nil || sel.Scope != "selected" {
		return true
	}
	str := func(path string) string {
		v, _ := manifests.ResolvePath(body, path)
		s, _ := v.(string)
		return s
	}
	in := func(list []string, v string) bool {
		if len(list) == 0 {
			return true
		}
		for _, x := range list {
			if x == v {
				return true
			}
		}
		return false
	}
	switch provider {
	case manifests.ProviderCodeHost:
		repo := str("repository.full_name")
		if repo == "" {
			repo = str("repository")
		}
		return in(sel.Repositories, repo)
	case manifests.ProviderIssueTrackerA:
		if len(sel.Labels) > 0 {
			v, _ := manifests.ResolvePath(body, "labels")
			list, _ := v.([]any)
			found := false
			for _, l := range list {
				name, _ := l.(string)
				if m, ok := l.(map[string]any); ok {
					name, _ = m["name"].(string)
				}
				if in(sel.Labels, name) {
					found = true
				}
			}
			if !found {
				return false
			}
		}
		return in(sel.ProjectIDs, str("project_id")) && in(sel.States, str("state")) && in(sel.TeamIDs, str("team_id"))
	case manifests.ProviderChatTool:
		return in(sel.Channels, str("channel"))
	}
	return false
}
