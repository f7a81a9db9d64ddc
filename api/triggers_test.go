package api

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/linefactory/linefactory/store"
	"github.com/linefactory/linefactory/workflows"
)

func TestWebhookTrigger(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		runs := &fakeRuns{}
		h.srv.cfg.Runs = runs
		h.deployExampleJob("fanout-build")
		h.deployExampleJob("sandbox-lifecycle")
		expect(t, h.do(req{method: "POST", path: "/factory/lines/webhook-deploy/deploy", body: readExample(t, "lines/webhook-deploy.toml"), contentType: "application/toml", scope: ScopeWrite}), 201)

		send := func(path, delivery, body string) response {
			hr := httptest.NewRequest("POST", path, strings.NewReader(body))
			hr.Header.Set("Authorization", "Bearer "+h.tokens[ScopeWrite])
			hr.Header.Set("Content-Type", "application/json")
			hr.Header.Set("X-Event-Name", "push")
			if delivery != "" {
				hr.Header.Set("X-Delivery-Id", delivery)
			}
			rec := httptest.NewRecorder()
			h.srv.ServeHTTP(rec, hr)
			r := response{Status: rec.Code, Header: rec.Header(), Body: rec.Body.Bytes()}
			h.validate(hr, r)
			return r
		}
		r := send("/factory/webhooks/deploy/main", "d-1", `{"ref":"main"}`)
		expect(t, r, http.StatusAccepted)
		list := r.list(t)
		if len(list) != 1 {
			t.Fatalf("started %v", list)
		}
		trig := list[0]["trigger"].(map[string]any)
		if trig["source"] != "webhook" || trig["delivery_id"] != "d-1" || trig["event_name"] != "push" || trig["payload"].(map[string]any)["body"] != nil {
			t.Fatalf("trigger summary in a list: %v", trig)
		}
		if len(runs.lines) != 1 || runs.lines[0].Trigger["body"].(map[string]any)["ref"] != "main" {
			t.Fatalf("engine got trigger %v", runs.lines)
		}
		// The single-run view carries the raw body.
		r = h.do(req{method: "GET", path: "/factory/line-runs/" + list[0]["id"].(string), scope: ScopeRead})
		if r.json(t)["trigger"].(map[string]any)["payload"].(map[string]any)["body"].(map[string]any)["ref"] != "main" {
			t.Fatalf("single run trigger: %s", r.Body)
		}
		// A repeated delivery starts nothing and answers with the earlier runs.
		r = send("/factory/webhooks/deploy/main", "d-1", `{"ref":"main"}`)
		expect(t, r, http.StatusOK)
		if l := r.list(t); len(l) != 1 || l[0]["id"] != list[0]["id"] || len(runs.lines) != 1 {
			t.Fatalf("repeated delivery: %v (engine runs %d)", l, len(runs.lines))
		}
		expectError(t, send("/factory/webhooks/nobody/listens", "", `{}`), 404, CodeNotFound)
		expectDetail(t, send("/factory/webhooks/deploy/main", strings.Repeat("d", 256), `{}`), "header", "X-Delivery-Id")
		expectDetail(t, send("/factory/webhooks/deploy/main", "", `{not json`), "body")
	})
}

func TestIntegrationTrigger(t *testing.T) {
	h := newHarness(t, storetestSQLite(t))
	runs := &fakeRuns{}
	h.srv.cfg.Runs = runs
	h.deployExampleJob("hello")
	expect(t, h.do(req{method: "POST", path: "/factory/lines/code-review/deploy", body: `{"manifest":` + readExample(t, "lines/code-review.json") + `}`, scope: ScopeWrite}), 201)

	send := func(provider, body, signature string) response {
		hr := httptest.NewRequest("POST", "/factory/integrations/"+provider+"/events", strings.NewReader(body))
		hr.Header.Set("Authorization", "Bearer "+h.tokens[ScopeWrite])
		hr.Header.Set("X-Event-Name", "pull_request.opened")
		if signature != "" {
			hr.Header.Set("X-Signature-256", signature)
		}
		rec := httptest.NewRecorder()
		h.srv.ServeHTTP(rec, hr)
		r := response{Status: rec.Code, Header: rec.Header(), Body: rec.Body.Bytes()}
		h.validate(hr, r)
		return r
	}
	event := `{"repository":{"full_name":"acme/api"},"sender":{"login":"bob"}}`
	r := send("code_host", event, "")
	expect(t, r, http.StatusAccepted)
	run := r.list(t)[0]
	if run["run_params"].(map[string]any)["who"] != "bob" || run["trigger"].(map[string]any)["provider"] != "code_host" {
		t.Fatalf("run %v", run)
	}
	// Params the event yields that do not fit the line fail that run, and
	// the engine starts nothing for it.
	started := len(runs.lines)
	r = send("code_host", `{"repository":{"full_name":"acme/api"},"sender":{"login":42}}`, "")
	expect(t, r, http.StatusAccepted)
	bad := r.list(t)[0]
	if f, _ := bad["failure"].(map[string]any); bad["status"] != "failed" || f == nil || f["code"] != "stage_params_invalid" || f["domain"] != "config" {
		t.Fatalf("run with a param that does not fit: %v", bad)
	}
	if len(runs.lines) != started {
		t.Fatalf("the engine started a run whose params do not fit")
	}
	// The selector keeps other repositories out; unknown providers are 404.
	expectError(t, send("code_host", `{"repository":{"full_name":"acme/other"}}`, ""), 404, CodeNotFound)
	expectError(t, send("mail", event, ""), 404, CodeNotFound)

	// With a signing secret, the signature is required and checked.
	h.srv.cfg.IntegrationSecrets = map[string]string{"code_host": "s3cret"}
	expectError(t, send("code_host", event, ""), 401, CodeAuthRequired)
	expectError(t, send("code_host", event, "sha256=00"), 401, CodeAuthRequired)
	mac := hmac.New(sha256.New, []byte("s3cret"))
	mac.Write([]byte(event))
	expect(t, send("code_host", event, "sha256="+hex.EncodeToString(mac.Sum(nil))), http.StatusAccepted)
}

// triggerSender posts trigger deliveries to the router. Its send is safe
// for concurrent use; check validates the answers on the test goroutine.
type triggerSender struct {
	h *harness
}

type sent struct {
	hr *http.Request
	r  response
}

func (s triggerSender) send(path, delivery, body string) sent {
	hr := httptest.NewRequest("POST", path, strings.NewReader(body))
	hr.Header.Set("Authorization", "Bearer "+s.h.tokens[ScopeWrite])
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("X-Event-Name", "push")
	if delivery != "" {
		hr.Header.Set("X-Delivery-Id", delivery)
	}
	rec := httptest.NewRecorder()
	s.h.srv.ServeHTTP(rec, hr)
	return sent{hr: hr, r: response{Status: rec.Code, Header: rec.Header(), Body: rec.Body.Bytes()}}
}

func (s triggerSender) check(x sent) response {
	s.h.validate(x.hr, x.r)
	return x.r
}

// refuseLine is an engine answer that refuses the runs of one line.
func refuseLine(line string) func(context.Context, any) error {
	return func(_ context.Context, in any) error {
		if in.(workflows.LineRunInput).LineName == line {
			return errors.New("engine says no")
		}
		return nil
	}
}

func deployLineJSON(h *harness, manifest string) {
	h.t.Helper()
	r := h.do(req{method: "POST", path: "/factory/lines/" + lineNameOf(h.t, manifest) + "/deploy", body: `{"manifest":` + manifest + `}`, scope: ScopeWrite})
	if r.Status != http.StatusCreated && r.Status != http.StatusOK {
		h.t.Fatalf("deploy line: %d %s", r.Status, r.Body)
	}
}

func lineNameOf(t *testing.T, manifest string) string {
	var m struct {
		Line struct{ Name string } `json:"line"`
	}
	if err := json.Unmarshal([]byte(manifest), &m); err != nil {
		t.Fatal(err)
	}
	return m.Line.Name
}

func dispatchesByLine(runs *fakeRuns) map[string]int {
	runs.mu.Lock()
	defer runs.mu.Unlock()
	out := map[string]int{}
	for _, in := range runs.lines {
		out[in.LineName]++
	}
	return out
}

func TestTriggerConcurrentDeliveries(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		runs := &fakeRuns{}
		h.srv.cfg.Runs = runs
		h.deployExampleJob("fanout-build")
		h.deployExampleJob("sandbox-lifecycle")
		h.deployExampleJob("hello")
		expect(t, h.do(req{method: "POST", path: "/factory/lines/webhook-deploy/deploy", body: readExample(t, "lines/webhook-deploy.toml"), contentType: "application/toml", scope: ScopeWrite}), 201)
		deployLineJSON(h, `{"line":{"name":"hook-two"},"trigger":{"type":"webhook","path":"deploy/main"},"stages":[{"id":"greet","job":"hello"}]}`)
		deployLineJSON(h, readExample(t, "lines/code-review.json"))
		s := triggerSender{h}

		cases := []struct {
			name, path, body string
			lines            []string
		}{
			{"webhook", "/factory/webhooks/deploy/main", `{"ref":"main"}`, []string{"hook-two", "webhook-deploy"}},
			{"integration", "/factory/integrations/code_host/events", `{"repository":{"full_name":"acme/api"},"sender":{"login":"bob"}}`, []string{"code-review"}},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				before := dispatchesByLine(runs)
				const n = 8
				out := make([]sent, n)
				var wg sync.WaitGroup
				for i := range out {
					wg.Add(1)
					go func() {
						defer wg.Done()
						out[i] = s.send(tc.path, "same-"+tc.name, tc.body)
					}()
				}
				wg.Wait()
				accepted := 0
				for _, x := range out {
					r := s.check(x)
					switch r.Status {
					case http.StatusAccepted:
						accepted++
					case http.StatusOK:
					default:
						t.Fatalf("concurrent delivery answered %d %s", r.Status, r.Body)
					}
				}
				if accepted != 1 {
					t.Errorf("%d of %d concurrent deliveries answered 202, want 1", accepted, n)
				}
				after := dispatchesByLine(runs)
				for _, line := range tc.lines {
					if got := after[line] - before[line]; got != 1 {
						t.Errorf("line %s: %d dispatches, want 1", line, got)
					}
					l, err := h.srv.store.ListLineRuns(context.Background(), store.LineRunFilter{LineName: line})
					if err != nil {
						t.Fatal(err)
					}
					if n := countDelivery(l, "same-"+tc.name); n != 1 {
						t.Errorf("line %s: %d runs of the delivery, want 1", line, n)
					}
				}
			})
		}
	})
}

func countDelivery(runs []store.LineRun, delivery string) int {
	n := 0
	for _, r := range runs {
		if r.Trigger.DeliveryID != nil && *r.Trigger.DeliveryID == delivery {
			n++
		}
	}
	return n
}

func TestTriggerDeliveryScope(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		runs := &fakeRuns{}
		h.srv.cfg.Runs = runs
		h.deployExampleJob("hello")
		deployLineJSON(h, `{"line":{"name":"shared-hook"},"trigger":{"type":"webhook","path":"shared/hook"},"stages":[{"id":"greet","job":"hello"}]}`)
		deployLineJSON(h, `{"line":{"name":"other-hook"},"trigger":{"type":"webhook","path":"other"},"stages":[{"id":"greet","job":"hello"}]}`)
		deployLineJSON(h, readExample(t, "lines/code-review.json"))
		deployLineJSON(h, `{"line":{"name":"issue-greet"},"trigger":{"type":"integration_trigger","name":"issue","provider":"issue_tracker_a","selector":{"kind":"issue","scope":"all"}},"stages":[{"id":"greet","job":"hello"}]}`)
		s := triggerSender{h}

		cases := []struct {
			name, firstPath, firstBody, secondPath, secondLine string
		}{
			{"webhook_path", "/factory/webhooks/shared/hook", `{}`, "/factory/webhooks/other", "other-hook"},
			{"integration_provider", "/factory/integrations/code_host/events", `{"repository":{"full_name":"acme/api"},"sender":{"login":"bob"}}`,
				"/factory/integrations/issue_tracker_a/events", "issue-greet"},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				delivery := "d-" + tc.name
				expect(t, s.check(s.send(tc.firstPath, delivery, tc.firstBody)), http.StatusAccepted)
				r := s.check(s.send(tc.secondPath, delivery, `{}`))
				if r.Status != http.StatusAccepted {
					t.Fatalf("same delivery id elsewhere: got %d %s, want 202", r.Status, r.Body)
				}
				if l := r.list(t); len(l) != 1 || l[0]["line_name"] != tc.secondLine {
					t.Fatalf("same delivery id elsewhere started %v, want one run of %s", l, tc.secondLine)
				}
				if got := dispatchesByLine(runs)[tc.secondLine]; got != 1 {
					t.Fatalf("%s dispatched %d times, want 1", tc.secondLine, got)
				}
				// Each is still a repeat where it was first sent.
				r = s.check(s.send(tc.secondPath, delivery, `{}`))
				expect(t, r, http.StatusOK)
				if l := r.list(t); len(l) != 1 || l[0]["line_name"] != tc.secondLine {
					t.Fatalf("repeat answered %v", l)
				}
			})
		}
	})
}

func TestWebhookLinesThatCannotStart(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		runs := (&fakeRuns{}).on("StartLineRun", refuseLine("refused-hook"))
		h.srv.cfg.Runs = runs
		h.deployExampleJob("hello")
		deployLineJSON(h, `{"line":{"name":"good-hook"},"trigger":{"type":"webhook","path":"many"},"stages":[{"id":"greet","job":"hello"}]}`)
		deployLineJSON(h, `{"line":{"name":"refused-hook"},"trigger":{"type":"webhook","path":"many"},"stages":[{"id":"greet","job":"hello"}]}`)
		s := triggerSender{h}

		r := s.check(s.send("/factory/webhooks/many", "d-many", `{}`))
		expect(t, r, http.StatusAccepted)
		list := r.list(t)
		if len(list) != 2 {
			t.Fatalf("started %d runs, want 2: %s", len(list), r.Body)
		}
		for _, run := range list {
			name := run["line_name"].(string)
			if name == "good-hook" {
				if run["status"] != "queued" {
					t.Errorf("good-hook: status %v, want queued", run["status"])
				}
				continue
			}
			f, _ := run["failure"].(map[string]any)
			if run["status"] != "failed" || f == nil || f["code"] != "dispatch_failed" || f["domain"] != "platform" ||
				!strings.Contains(fmt.Sprint(f["error_message"]), "could not be dispatched") {
				t.Errorf("%s: got %v, want a failed run with dispatch_failed/platform", name, run)
			}
			created, _ := time.Parse(time.RFC3339Nano, run["created_at"].(string))
			completed, _ := time.Parse(time.RFC3339Nano, fmt.Sprint(run["completed_at"]))
			if completed.Before(created) {
				t.Errorf("%s: completed_at %v before created_at %v", name, completed, created)
			}
		}
		if d := dispatchesByLine(runs); len(d) != 1 || d["good-hook"] != 1 {
			t.Errorf("engine took %v, want good-hook once", d)
		}
		// The sender's retry is a repeat of the whole delivery.
		r = s.check(s.send("/factory/webhooks/many", "d-many", `{}`))
		expect(t, r, http.StatusOK)
		if l := r.list(t); len(l) != 2 {
			t.Fatalf("repeat answered %d runs, want 2", len(l))
		}
		// Manual starts still answer the problem.
		expectError(t, h.do(req{method: "POST", path: "/factory/lines/refused-hook/runs", body: `{}`, scope: ScopeWrite}), http.StatusBadGateway, CodeBadGateway)
	})
}
