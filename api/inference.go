package api

import (
	"net/http"
	"strings"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/gin-gonic/gin"

	"github.com/linefactory/linefactory/manifests/agentconf"
)

// registerAgentRoutes adds the endpoints of the server configuration file.
func (s *Server) registerAgentRoutes() {
	s.handle(http.MethodGet, "/inference/models", ScopeRead, s.inferenceModels)
}

type modelListing struct {
	Name               string   `json:"name"`
	Efforts            []string `json:"efforts"`
	InputCentsPerMTok  *float64 `json:"input_cents_per_mtok"`
	OutputCentsPerMTok *float64 `json:"output_cents_per_mtok"`
}

type harnessListing struct {
	Harness      string         `json:"harness"`
	DefaultModel *string        `json:"default_model"`
	Efforts      []string       `json:"efforts"`
	Models       []modelListing `json:"models"`
}

type routerListing struct {
	Configured  bool    `json:"configured"`
	Model       *string `json:"model"`
	WaitTimeout *string `json:"wait_timeout"`
}

// InferenceModels is the answer of GET /inference/models (AGENTS.md).
type InferenceModels struct {
	Harnesses       []harnessListing `json:"harnesses"`
	InferenceModels []modelListing   `json:"inference_models"`
	Router          routerListing    `json:"router"`
}

func listModels(ms []agentconf.Model, fallback []string) []modelListing {
	out := make([]modelListing, 0, len(ms))
	for _, m := range ms {
		efforts := m.Efforts
		if len(efforts) == 0 {
			efforts = fallback
		}
		if efforts == nil {
			efforts = []string{}
		}
		out = append(out, modelListing{Name: m.Name, Efforts: efforts, InputCentsPerMTok: m.InputCentsPerMTok, OutputCentsPerMTok: m.OutputCentsPerMTok})
	}
	return out
}

// ListInferenceModels describes what a configuration file configures; a nil
// config configures nothing.
func ListInferenceModels(c *agentconf.Config) InferenceModels {
	out := InferenceModels{Harnesses: []harnessListing{}, InferenceModels: []modelListing{}}
	for _, h := range c.SortedHarnesses() {
		efforts := h.Efforts
		if efforts == nil {
			efforts = []string{}
		}
		hl := harnessListing{Harness: h.Name, Efforts: efforts, Models: listModels(h.Models, h.Efforts)}
		if h.DefaultModel != "" {
			hl.DefaultModel = &h.DefaultModel
		}
		out.Harnesses = append(out.Harnesses, hl)
	}
	if c != nil && c.Inference != nil {
		out.InferenceModels = listModels(c.Inference.Models, nil)
	}
	// A run waits for a person's select for the default time when no
	// [router] (or no wait_timeout) is configured: the listing shows it.
	wait := agentconf.DefaultRouterWaitTimeout
	if c != nil && c.Router != nil {
		out.Router.Configured = true
		if c.Router.Model != "" {
			out.Router.Model = &c.Router.Model
		}
		if c.Router.WaitTimeout > 0 {
			wait = c.Router.WaitTimeout
		}
	}
	wt := compactDuration(wait)
	out.Router.WaitTimeout = &wt
	return out
}

func (s *Server) inferenceModels(c *gin.Context) error {
	c.JSON(http.StatusOK, ListInferenceModels(s.cfg.Agents))
	return nil
}

func agentSchemas() openapi3.Schemas {
	model := obj(map[string]*openapi3.Schema{"name!": str(), "efforts!": arr(str()),
		"input_cents_per_mtok!": openapi3.NewFloat64Schema().WithNullable(), "output_cents_per_mtok!": openapi3.NewFloat64Schema().WithNullable()}, nil)
	harness := obj(map[string]*openapi3.Schema{"harness!": str(), "default_model!": strN(), "efforts!": arr(str()), "models!": arr(model)}, nil)
	router := obj(map[string]*openapi3.Schema{"configured!": boolean(), "model!": strN(), "wait_timeout!": strN()}, nil)
	listing := obj(map[string]*openapi3.Schema{"harnesses!": arr(harness), "inference_models!": arr(model), "router!": router}, nil)
	return openapi3.Schemas{"InferenceModels": listing.NewRef()}
}

// compactDuration writes d as Go does, without zero trailing units: 24h, 1h30m, 90s → 1m30s.
func compactDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
