package workflows

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/linefactory/linefactory/activities/inferencetest"
	"github.com/linefactory/linefactory/manifests/inference"
	"github.com/linefactory/linefactory/manifests/manifesttest"
	"github.com/linefactory/linefactory/manifests/run"
	"github.com/linefactory/linefactory/store"
)

// triageLine: a triage stage whose agentic transition routes to fix (with
// a literal param) or to drop.
var triageLine = manifesttest.Line("triage")

// fakeRouter is the router's model: it answers content (or fails with
// status), with usage 1000 input and 500 output tokens.
func fakeRouter(content string, status int) *inferencetest.Server {
	return &inferencetest.Server{Content: content, Status: status, PromptTokens: 1000, CompletionTokens: 500}
}

func withRouter(t *testing.T, f *fixture, fake *inferencetest.Server) {
	t.Helper()
	url := fake.Start(t)
	in, out := 20.0, 60.0
	f.acts.Inference = &inference.Config{BaseURL: url + "/v1", APIKey: "upstream-key",
		Models: map[string]inference.ModelPrice{"router-small": {InputCentsPerMTok: &in, OutputCentsPerMTok: &out}},
		Router: &inference.Router{Model: "router-small", Timeout: 5 * time.Second, WaitTimeout: time.Hour}}
}

func TestAgenticRouterPicks(t *testing.T) {
	f := newFixture(t)
	fake := fakeRouter(`{"option": "fix", "reason": "it can be fixed"}`, 0)
	withRouter(t, f, fake)
	res, rec := f.runLine(t, lineInput(t, triageLine, nil), nil)
	if res.Status != run.Succeeded {
		t.Fatalf("status %s %+v", res.Status, res.Failure)
	}
	if len(rec.Transitions) != 1 {
		t.Fatalf("transitions %+v", rec.Transitions)
	}
	tr := rec.Transitions[0]
	if tr.ID != "route" || tr.To != "fix" || deref(tr.Option) != "fix" || deref(tr.DecidedBy) != "router" || deref(tr.Reason) != "it can be fixed" || tr.DecidedAt == nil {
		t.Fatalf("taken transition %+v", tr)
	}
	if got := rec.StageOutputs["fix"]["greeting"]; got != "hi-fixer" {
		t.Fatalf("the option's params were not bound: fix greeting %v", got)
	}
	// 1000 input tokens at 20 cents/MTok + 500 output at 60 = 0.05 cents, rounded up.
	if rec.RouterCostCents != 1 || len(rec.RouterCalls) != 1 || rec.RouterCalls[0].MicroCents != 50_000 {
		t.Fatalf("router cost %d calls %+v", rec.RouterCostCents, rec.RouterCalls)
	}
	var stages int64
	for _, s := range rec.Stages {
		stages += s.InferenceCostCents
	}
	if rec.InferenceCostCents != stages+1 || rec.TotalCostCents != rec.ComputeCostCents+rec.InferenceCostCents {
		t.Fatalf("line costs: inference %d (stages %d), total %d, compute %d", rec.InferenceCostCents, stages, rec.TotalCostCents, rec.ComputeCostCents)
	}
	// What the router was asked.
	if reqs, auth := fake.Requests(), fake.Auth(); len(reqs) != 1 || auth[0] != "Bearer upstream-key" {
		t.Fatalf("router requests %d auth %v", len(reqs), auth)
	}
	req := fake.Requests()[0]
	msgs, _ := req["messages"].([]any)
	if len(msgs) != 2 || req["model"] != "router-small" {
		t.Fatalf("request %v", req)
	}
	system := msgs[0].(map[string]any)["content"].(string)
	if !strings.Contains(system, "Prefer fixing over dropping.") || !strings.Contains(system, "Fix what can be fixed.") {
		t.Fatalf("system message %q", system)
	}
	var user map[string]any
	if err := json.Unmarshal([]byte(msgs[1].(map[string]any)["content"].(string)), &user); err != nil {
		t.Fatalf("user message is not JSON: %v", err)
	}
	stage, _ := user["stage"].(map[string]any)
	opts, _ := user["options"].([]any)
	if stage["stage"] != "triage" || stage["status"] != "succeeded" || len(opts) != 2 {
		t.Fatalf("user message %v", user)
	}
	if outs, _ := stage["outputs"].(map[string]any); outs["greeting"] != "hi-world" {
		t.Fatalf("stage outputs in the user message %v", stage)
	}
	rf, _ := req["response_format"].(map[string]any)
	if rf["type"] != "json_schema" {
		t.Fatalf("response_format %v", rf)
	}
}

func TestAgenticRouterUnknownOption(t *testing.T) {
	f := newFixture(t)
	withRouter(t, f, fakeRouter(`{"option": "escalate", "reason": "why not"}`, 0))
	res, rec := f.runLine(t, lineInput(t, triageLine, nil), nil)
	if res.Status != run.Failed || res.Failure.Code != "ambiguous_agentic_transition" || res.Failure.Domain != "agent" {
		t.Fatalf("result %s %+v", res.Status, res.Failure)
	}
	if !strings.Contains(res.Failure.ErrorMessage, `"escalate"`) || rec.RouterCostCents != 1 {
		t.Fatalf("failure %q, router cost %d", res.Failure.ErrorMessage, rec.RouterCostCents)
	}
}

// selectResult is what one select Update got.
type selectResult struct {
	rejected error
	err      error // the answer's, or its decoding's
	record   store.LineRun
	done     bool
}

func sendSelect(env *testsuite.TestWorkflowEnvironment, id string, in SelectInput) *selectResult {
	out := &selectResult{}
	env.UpdateWorkflow(SelectUpdate, id, &testsuite.TestUpdateCallback{
		OnAccept: func() {},
		OnReject: func(err error) { out.rejected, out.done = err, true },
		OnComplete: func(v any, err error) {
			// The answer is the record's JSON, as the API decodes it.
			if rec, ok := v.(LineRecord); err == nil && ok {
				err = json.Unmarshal(rec, &out.record)
			}
			out.err, out.done = err, true
		},
	}, in)
	return out
}

func rejectedWith(err error) string {
	var ae *temporal.ApplicationError
	if errors.As(err, &ae) {
		return ae.Type()
	}
	return ""
}

func TestAgenticWaitThenSelect(t *testing.T) {
	for _, name := range []string{"no router", "router unreachable"} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			if name == "router unreachable" {
				withRouter(t, f, fakeRouter("", http.StatusServiceUnavailable))
			}
			in := lineInput(t, triageLine, nil)
			var waiting store.LineRun
			var bad []*selectResult
			var good *selectResult
			res, rec := f.runLineWith(t, in, lineOpts{setup: func(env *testsuite.TestWorkflowEnvironment) {
				env.RegisterDelayedCallback(func() {
					waiting = f.line(in.RunID)
					bad = append(bad,
						sendSelect(env, "u1", SelectInput{TransitionID: "route", Option: "escalate", Actor: "alice"}),
						sendSelect(env, "u2", SelectInput{TransitionID: "other", Option: "fix", Actor: "alice"}),
						sendSelect(env, "u3", SelectInput{TransitionID: "route", Actor: "alice"}))
					good = sendSelect(env, "u4", SelectInput{TransitionID: "route", Option: "drop", Actor: "alice"})
				}, time.Minute)
			}})
			if waiting.Status != run.Waiting || waiting.Waiting == nil || waiting.Waiting.TransitionID != "route" || len(waiting.Waiting.Options) != 2 {
				t.Fatalf("while waiting the record is %s %+v", waiting.Status, waiting.Waiting)
			}
			if (name == "router unreachable") != (waiting.Waiting.RouterError != nil) {
				t.Fatalf("router error %v", waiting.Waiting.RouterError)
			}
			for i, want := range []string{CodeControlUnknownOption, CodeControlTargetInvalid, CodeControlMissingID} {
				if got := rejectedWith(bad[i].rejected); got != want {
					t.Fatalf("bad select %d: rejected with %q (%v), want %s", i, got, bad[i].rejected, want)
				}
			}
			if msg := fmt.Sprint(bad[0].rejected); !strings.Contains(msg, "(options: fix, drop)") {
				t.Errorf("unknown option refusal lists the options as %q", msg)
			}
			if good == nil || !good.done || good.rejected != nil || good.err != nil || good.record.Status != run.Running || good.record.Waiting != nil {
				t.Fatalf("good select %+v", good)
			}
			if res.Status != run.Succeeded {
				t.Fatalf("status %s %+v", res.Status, res.Failure)
			}
			tr := rec.Transitions[0]
			if tr.To != "drop" || deref(tr.Option) != "drop" || deref(tr.DecidedBy) != "alice" || tr.DecidedAt == nil || rec.Waiting != nil {
				t.Fatalf("taken transition %+v", tr)
			}
			if _, ok := rec.StageOutputs["drop"]; !ok {
				t.Fatalf("drop did not run: %v", rec.StageOutputs)
			}
		})
	}
}

func TestAgenticWaitExpires(t *testing.T) {
	f := newFixture(t)
	res, rec := f.runLine(t, lineInput(t, triageLine, nil), nil)
	if res.Status != run.Failed || res.Failure.Code != "routing_wait_expired" || res.Failure.Domain != "user" {
		t.Fatalf("result %s %+v", res.Status, res.Failure)
	}
	if rec.Status != run.Failed || rec.Waiting != nil || len(rec.Transitions) != 0 {
		t.Fatalf("record %s waiting %+v transitions %+v", rec.Status, rec.Waiting, rec.Transitions)
	}
}

func TestAgenticLineTimeoutWhileWaiting(t *testing.T) {
	f := newFixture(t)
	res, _ := f.runLine(t, lineInput(t, triageLine+"[limits]\ntimeout = \"1h\"\n", nil), nil)
	if res.Status != run.Failed || res.Failure.Code != "line_timeout" {
		t.Fatalf("result %s %+v", res.Status, res.Failure)
	}
}

func TestAgenticStopWhileWaiting(t *testing.T) {
	f := newFixture(t)
	in := lineInput(t, triageLine, nil)
	var status run.Status
	res, rec := f.runLineWith(t, in, lineOpts{setup: func(env *testsuite.TestWorkflowEnvironment) {
		env.RegisterDelayedCallback(func() {
			status = f.line(in.RunID).Status
			env.CancelWorkflow()
		}, time.Minute)
	}})
	if status != run.Waiting {
		t.Fatalf("status before the stop %s", status)
	}
	if res.Status != run.Cancelled || res.Failure.Code != "user_cancelled" || rec.Status != run.Cancelled || rec.Waiting != nil {
		t.Fatalf("result %s %+v, record %s %+v", res.Status, res.Failure, rec.Status, rec.Waiting)
	}
}
