package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/gin-gonic/gin"

	"github.com/linefactory/linefactory/manifests/agentconf"
	"github.com/linefactory/linefactory/manifests/inference"
	"github.com/linefactory/linefactory/manifests/run"
	"github.com/linefactory/linefactory/store"
)

// GatewayStore is what the inference gateway needs of the store besides
// job runs: the per-run tokens (*store.Store has them).
type GatewayStore interface {
	FindInferenceToken(ctx context.Context, hash string) (store.InferenceToken, error)
}

// Gateway routes (the base steps get as SVC_INFERENCE_BASE_URL).
const (
	GatewayBase            = "/inference/v1"
	gatewayChatCompletions = GatewayBase + "/chat/completions"
	gatewayModels          = GatewayBase + "/models"
	// maxGatewayResponse bounds a non-streamed response the gateway reads
	// whole for its usage.
	maxGatewayResponse = 64 << 20
)

// gatewayCaller is the job run a gateway request is made for.
type gatewayCaller struct {
	jobRunID string
	step     string
}

// gatewayAuth checks a gateway token: it must be one minted for a job run
// that has not ended.
func (s *Server) gatewayAuth(c *gin.Context) (gatewayCaller, error) {
	ctx := c.Request.Context()
	inf := s.cfg.Inference
	if inf == nil || inf.BaseURL == "" {
		return gatewayCaller{}, httpError(http.StatusServiceUnavailable, CodeResourceUnavailable, "no [inference] endpoint is configured on this server")
	}
	gs, ok := s.store.(GatewayStore)
	if !ok {
		return gatewayCaller{}, httpError(http.StatusServiceUnavailable, CodeResourceUnavailable, "this server keeps no inference tokens")
	}
	secret, ok := bearerToken(c.GetHeader("Authorization"))
	if !ok {
		return gatewayCaller{}, httpError(http.StatusUnauthorized, CodeAuthRequired, "a run's SVC_INFERENCE_TOKEN is required: Authorization: Bearer <token>")
	}
	tok, err := gs.FindInferenceToken(ctx, inference.HashToken(secret))
	if errors.Is(err, store.ErrNotFound) {
		return gatewayCaller{}, httpError(http.StatusUnauthorized, CodeAuthRequired, "the inference token is not valid")
	}
	if err != nil {
		return gatewayCaller{}, err
	}
	jr, err := s.store.GetJobRun(ctx, tok.JobRunID)
	if errors.Is(err, store.ErrNotFound) || (err == nil && run.JobRun.Terminal(jr.Status)) {
		return gatewayCaller{}, httpError(http.StatusUnauthorized, CodeAuthRequired, "the inference token's run has ended")
	}
	if err != nil {
		return gatewayCaller{}, err
	}
	c.Set(actorKey, "inference:"+tok.JobRunID)
	return gatewayCaller{jobRunID: tok.JobRunID, step: tok.Step}, nil
}

// gatewayModelsList forwards GET /models to [inference].
func (s *Server) gatewayModelsList(c *gin.Context) error {
	if _, err := s.gatewayAuth(c); err != nil {
		return err
	}
	s.gatewayProxy(c, "/models", nil, nil)
	return nil
}

// gatewayChat forwards a chat completion to [inference] and books the
// usage of its response on the caller's job run. A stream is passed
// through as it arrives, asked for its final usage chunk.
func (s *Server) gatewayChat(c *gin.Context) error {
	caller, err := s.gatewayAuth(c)
	if err != nil {
		return err
	}
	body, err := io.ReadAll(c.Request.Body)
	if err != nil {
		return err
	}
	var req map[string]any
	if err := json.Unmarshal(body, &req); err != nil {
		return invalid("value_error", "the body must be a JSON object: "+err.Error(), "body")
	}
	model, _ := req["model"].(string)
	if stream, _ := req["stream"].(bool); stream {
		opts, _ := req["stream_options"].(map[string]any)
		if opts == nil {
			opts = map[string]any{}
		}
		opts["include_usage"] = true
		req["stream_options"] = opts
		if body, err = json.Marshal(req); err != nil {
			return err
		}
	}
	book := func(u usage) { s.bookGatewayUsage(caller, model, u) }
	s.gatewayProxy(c, "/chat/completions", body, book)
	return nil
}

// gatewayProxy forwards the request to [inference] + path with the
// upstream key (the caller's token never leaves the service). book, when
// set, receives the usage of the response before the caller sees its end.
func (s *Server) gatewayProxy(c *gin.Context, path string, body []byte, book func(usage)) {
	inf := s.cfg.Inference
	target, err := url.Parse(strings.TrimSuffix(inf.BaseURL, "/") + path)
	if err != nil {
		s.writeError(c, err)
		return
	}
	proxy := &httputil.ReverseProxy{
		FlushInterval: -1, // streams go through as they arrive
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL = target
			r.Out.Host = target.Host
			r.Out.Header.Del("Authorization")
			r.Out.Header.Del("Cookie")
			if inf.APIKey != "" {
				r.Out.Header.Set("Authorization", "Bearer "+inf.APIKey)
			}
			// The transport asks for gzip itself and decompresses, so the
			// usage can be read.
			r.Out.Header.Del("Accept-Encoding")
			if body != nil {
				r.Out.Body = io.NopCloser(bytes.NewReader(body))
				r.Out.ContentLength = int64(len(body))
				r.Out.Header.Set("Content-Length", strconv.Itoa(len(body)))
			}
		},
		ModifyResponse: func(resp *http.Response) error {
			if book == nil {
				return nil
			}
			if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
				resp.Body = &sseUsage{body: resp.Body, book: book}
				return nil
			}
			data, err := io.ReadAll(io.LimitReader(resp.Body, maxGatewayResponse))
			resp.Body.Close()
			if err != nil {
				return err
			}
			var doc struct {
				Usage *usage `json:"usage"`
			}
			if json.Unmarshal(data, &doc) == nil && doc.Usage != nil {
				book(*doc.Usage)
			}
			resp.Body = io.NopCloser(bytes.NewReader(data))
			resp.ContentLength = int64(len(data))
			resp.Header.Set("Content-Length", strconv.Itoa(len(data)))
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			s.log.WarnContext(r.Context(), "inference gateway", slog.String("request_id", requestID(c)), slog.String("error", err.Error()))
			s.writeError(c, httpError(http.StatusBadGateway, CodeBadGateway, "the inference endpoint did not answer"))
		},
	}
	proxy.ServeHTTP(c.Writer, c.Request)
}

// usage is the usage object of an OpenAI-compatible response.
type usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
}

// sseUsage passes a server-sent event stream through and books the last
// usage it carried when the stream ends ("data: [DONE]" or its end),
// before the caller reads that end.
type sseUsage struct {
	body io.ReadCloser
	book func(usage)
	line []byte // a line not complete yet
	last *usage
	once sync.Once
}

func (r *sseUsage) Read(p []byte) (int, error) {
	n, err := r.body.Read(p)
	r.scan(p[:n])
	if err != nil {
		r.finish()
	}
	return n, err
}

func (r *sseUsage) scan(b []byte) {
	r.line = append(r.line, b...)
	for {
		i := bytes.IndexByte(r.line, '\n')
		if i < 0 {
			break
		}
		line := bytes.TrimSpace(r.line[:i])
		r.line = r.line[i+1:]
		data, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue
		}
		data = bytes.TrimSpace(data)
		if string(data) == "[DONE]" {
			r.finish()
			continue
		}
		var chunk struct {
			Usage *usage `json:"usage"`
		}
		if json.Unmarshal(data, &chunk) == nil && chunk.Usage != nil {
			u := *chunk.Usage
			r.last = &u
		}
	}
	if len(r.line) > 1<<20 { // no line is that long: not an event stream
		r.line = nil
	}
}

func (r *sseUsage) finish() {
	r.once.Do(func() {
		if r.last != nil {
			r.book(*r.last)
		}
	})
}

func (r *sseUsage) Close() error {
	r.finish()
	return r.body.Close()
}

// bookGatewayUsage adds a response's usage to the job run's gateway usage
// and its inference cost (the priced usage, rounded up to cents per run).
func (s *Server) bookGatewayUsage(caller gatewayCaller, model string, u usage) {
	micro, priced := s.cfg.Inference.Price(model, u.PromptTokens, u.CompletionTokens)
	_, err := s.store.UpdateJobRun(context.Background(), caller.jobRunID, func(r *store.JobRun) error {
		g := r.GatewayUsage
		if g == nil {
			g = &store.GatewayUsage{}
		}
		before := agentconf.CentsRoundedUp(g.MicroCents)
		g.Requests++
		g.InputTokens += u.PromptTokens
		g.OutputTokens += u.CompletionTokens
		g.MicroCents += micro
		if !priced && model != "" && !containsString(g.Unpriced, model) {
			g.Unpriced = append(g.Unpriced, model)
			sort.Strings(g.Unpriced)
		}
		r.GatewayUsage = g
		bookStepUsage(r, caller.step, model, u, s.cfg.Inference)
		r.InferenceCostCents += agentconf.CentsRoundedUp(g.MicroCents) - before
		r.TotalCostCents = r.ComputeCostCents + r.InferenceCostCents
		return nil
	})
	if err != nil {
		s.log.Error("book inference gateway usage", slog.String("job_run_id", caller.jobRunID), slog.String("error", err.Error()))
	}
}

func containsString(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// bookStepUsage adds a gateway response's usage to the timeline entry of
// the step ("task/step") that made the call: its usage lines and its cost
// (its lines priced, rounded up), so the step shows what the service
// measured rather than what the agent reported.
func bookStepUsage(r *store.JobRun, step, model string, u usage, inf *inference.Config) {
	for i := range r.StepTimeline {
		e := &r.StepTimeline[i]
		if e.TaskName+"/"+e.Name != step {
			continue
		}
		e.Usage = append(e.Usage, store.AgentUsage{Model: model, InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens})
		var micro int64
		for _, l := range e.Usage {
			m, _ := inf.Price(l.Model, l.InputTokens, l.OutputTokens)
			micro += m
		}
		e.InferenceCostCents = agentconf.CentsRoundedUp(micro)
		return
	}
}
