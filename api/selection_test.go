package api

import (
	"context"
	"testing"

	"github.com/linefactory/linefactory/manifests/run"
	"github.com/linefactory/linefactory/store"
	"github.com/linefactory/linefactory/workflows"
)

func TestSelectOfEndedRun(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		h.srv.cfg.Runs = &fakeRuns{}
		h.deployLine(t)
		id := h.startLine(t, nil)
		control := func(body map[string]any) response {
			return h.do(req{method: "POST", path: "/factory/line-runs/" + id + "/control", body: body, scope: ScopeWrite})
		}
		sel := map[string]any{"action": "select", "transition_id": "pick", "option": "a"}
		if got := detailType(t, control(sel)); got != workflows.CodeControlTargetInvalid {
			t.Errorf("select of a run waiting for nothing: %s", got)
		}
		if got := detailType(t, control(map[string]any{"action": "select", "transition_id": "", "option": "a"})); got != workflows.CodeControlMissingID {
			t.Errorf("select with an empty transition_id: %s", got)
		}
		st := h.srv.store.(*store.Store)
		code, msg := run.RoutingWaitExpired, "nobody selected"
		if _, err := st.UpdateLineRun(context.Background(), id, func(r *store.LineRun) error {
			r.Status, r.Failure = "failed", &store.LineRunFailure{Code: &code, Domain: "user", ErrorMessage: &msg}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if got := detailType(t, control(sel)); got != workflows.CodeControlWaitExpired {
			t.Errorf("select after the wait expired: %s", got)
		}
	})
}
