package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/linefactory/linefactory/activities"
	"github.com/linefactory/linefactory/manifests/inference"
	"github.com/linefactory/linefactory/store"
)

// fakeUpstream is an OpenAI-compatible endpoint: chat completions (a
// stream when asked) with fixed usage, and a models list.
type fakeUpstream struct {
	mu      sync.Mutex
	auth    []string
	bodies  []map[string]any
	headers []http.Header
}

func (f *fakeUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.auth = append(f.auth, r.Header.Get("Authorization"))
	f.headers = append(f.headers, r.Header.Clone())
	var body map[string]any
	_ = json.NewDecoder(r.Body).Decode(&body)
	f.bodies = append(f.bodies, body)
	f.mu.Unlock()
	if r.URL.Path == "/v1/models" {
		_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": []any{map[string]any{"id": "m", "object": "model"}}})
		return
	}
	if r.URL.Path != "/v1/chat/completions" {
		http.NotFound(w, r)
		return
	}
	if stream, _ := body["stream"].(bool); stream {
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		for _, word := range []string{"hel", "lo"} {
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":%q}}]}\n\n", word)
			fl.Flush()
		}
		if opts, _ := body["stream_options"].(map[string]any); opts["include_usage"] == true {
			fmt.Fprint(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":2000000,\"completion_tokens\":1000000,\"total_tokens\":3000000}}\n\n")
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"id": "c", "object": "chat.completion",
		"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": "hi"}}},
		"usage":   map[string]any{"prompt_tokens": 1000000, "completion_tokens": 500000, "total_tokens": 1500000}})
}

func TestInferenceGateway(t *testing.T) {
	st := storetestSQLite(t)
	h := newHarness(t, st)
	up := &fakeUpstream{}
	upstream := httptest.NewServer(up)
	defer upstream.Close()
	in, out := 100.0, 300.0
	inf := &inference.Config{BaseURL: upstream.URL + "/v1", APIKey: "upstream-secret",
		Models: map[string]inference.ModelPrice{"m": {InputCentsPerMTok: &in, OutputCentsPerMTok: &out}}}
	h.srv.cfg.Inference = inf
	srv := httptest.NewServer(h.srv)
	defer srv.Close()
	inf.GatewayURL = srv.URL + GatewayBase

	ctx := context.Background()
	if _, err := st.CreateJobRun(ctx, store.JobRun{ID: "jr_gw", JobName: "j", JobVersionID: "jv", Status: "running", ComputeCostCents: 2,
		StepTimeline: []store.StepTimelineEntry{{TaskName: "t", Name: "think", Status: "running"}}}); err != nil {
		t.Fatal(err)
	}
	acts := &activities.Activities{Inference: inf, InferenceTokens: st}
	env, err := acts.InferenceStepEnv(ctx, "jr_gw", "t/think")
	if err != nil {
		t.Fatal(err)
	}
	token := env[activities.EnvInferenceToken]
	if env[activities.EnvOpenAIAPIKey] != token || env[activities.EnvInferenceBaseURL] != inf.GatewayURL || env[activities.EnvOpenAIBaseURL] != inf.GatewayURL {
		t.Fatalf("step env %v", env)
	}
	for _, v := range env {
		if strings.Contains(v, "upstream-secret") {
			t.Fatal("the upstream key reached the step's environment")
		}
	}
	call := func(method, path, bearer, body string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}

	// Plain completion: 1M input x 100 + 0.5M output x 300 = 250 cents.
	resp := call("POST", "/inference/v1/chat/completions", token, `{"model": "m", "messages": [{"role": "user", "content": "hi"}]}`)
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(data), `"content":"hi"`) {
		t.Fatalf("completion: %d %s", resp.StatusCode, data)
	}
	// Stream: passed through chunk by chunk, usage asked for and booked:
	// 2M x 100 + 1M x 300 = 500 cents.
	resp = call("POST", "/inference/v1/chat/completions", token, `{"model": "m", "stream": true, "messages": []}`)
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("stream content type %q", ct)
	}
	sc := bufio.NewScanner(resp.Body)
	var events []string
	for sc.Scan() {
		if line := sc.Text(); line != "" {
			events = append(events, line)
		}
	}
	resp.Body.Close()
	if len(events) != 4 || events[3] != "data: [DONE]" || !strings.Contains(events[2], "usage") {
		t.Fatalf("stream events %q", events)
	}
	resp = call("GET", "/inference/v1/models", token, "")
	data, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(data), `"id":"m"`) {
		t.Fatalf("models: %d %s", resp.StatusCode, data)
	}
	for i, a := range up.auth {
		if a != "Bearer upstream-secret" {
			t.Fatalf("upstream request %d authorized with %q", i, a)
		}
	}
	jr, err := st.GetJobRun(ctx, "jr_gw")
	if err != nil {
		t.Fatal(err)
	}
	if jr.InferenceCostCents != 750 || jr.TotalCostCents != 752 || jr.GatewayUsage == nil || jr.GatewayUsage.Requests != 2 || jr.GatewayUsage.InputTokens != 3_000_000 {
		t.Fatalf("job run costs: inference %d total %d usage %+v", jr.InferenceCostCents, jr.TotalCostCents, jr.GatewayUsage)
	}
	// The calling step's timeline entry shows the measured usage and cost.
	if e := jr.StepTimeline[0]; e.InferenceCostCents != 750 || len(e.Usage) != 2 || e.Usage[1].InputTokens != 2_000_000 || e.Usage[0].Model != "m" {
		t.Fatalf("step entry: cost %d usage %+v", e.InferenceCostCents, e.Usage)
	}

	// Refused: no token, an API token, a wrong token, and the token once
	// the run has ended.
	for _, bearer := range []string{"", h.tokens[ScopeAdmin], "lfi_nope"} {
		resp = call("POST", "/inference/v1/chat/completions", bearer, `{"model": "m"}`)
		resp.Body.Close()
		if resp.StatusCode != 401 {
			t.Fatalf("bearer %q: %d", bearer, resp.StatusCode)
		}
	}
	if _, err := st.UpdateJobRun(ctx, "jr_gw", func(r *store.JobRun) error { r.Status = "succeeded"; return nil }); err != nil {
		t.Fatal(err)
	}
	resp = call("GET", "/inference/v1/models", token, "")
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("token after the run ended: %d", resp.StatusCode)
	}
	if n := len(up.auth); n != 3 {
		t.Fatalf("the upstream saw %d requests, want 3", n)
	}
}
