package workflows

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"

	"github.com/linefactory/linefactory/manifests"
	"github.com/linefactory/linefactory/manifests/manifesttest"
)

// managerWrites are the local activities a line manager writes its record
// with.
var managerWrites = []string{"RecordTurn", "CreateStageRun", "RecordStage", "RecordTransition", "FinishLineRun", "LineWrites"}

// TestLineRunHeldWritesRecordTheSame: a line run whose input asks for held
// writes (version 2: LineWrites) ends with the record, result and query
// answers of one that writes each part by itself (version 1), in every way
// a run can go: stages in a row, loops, attempts, failures of each kind,
// budgets, continue-as-new.
func TestLineRunHeldWritesRecordTheSame(t *testing.T) {
	literal := func(in *LineRunInput) {
		in.Manifest.Transitions[1].Params = map[string]manifests.ParamBinding{"who": {Type: manifests.BindLiteral, Value: "loop"}}
	}
	cases := []struct {
		name, src string
		params    map[string]any
		change    func(*LineRunInput)
		maxTurns  int
	}{
		{name: "three stages", src: manifesttest.Line("three-stages"), params: map[string]any{"who": "x"}},
		{name: "three stages, two turns a run", src: manifesttest.Line("three-stages"), params: map[string]any{"who": "x"}, maxTurns: 2},
		{name: "loop until an output", src: manifesttest.Line("loop-until-output"), change: literal},
		{name: "bound param rejected", src: manifesttest.Line("loop-until-output")},
		{name: "attempts", src: oneStage("flaky") + "max_attempts = 3\n"},
		{name: "attempts over budget", src: oneStage("flaky") + "max_attempts = 3\n[limits]\nbudget_usd = \"0.00\"\n"},
		{name: "stage failed", src: oneStage("fail") + "max_attempts = 2\n"},
		{name: "no route", src: manifesttest.Line("no-route")},
		{name: "ambiguous", src: manifesttest.Line("ambiguous-transition")},
		{name: "transition max_iterations", src: manifesttest.Line("inc-loop", map[string]any{"transition": "max_iterations = 2", "limits": ""})},
		{name: "budget", src: manifesttest.Line("inc-loop", map[string]any{"transition": "", "limits": "[limits]\nbudget_usd = \"0.00\""})},
		{name: "transition params invalid", src: manifesttest.Line("transition-params-invalid")},
		{name: "stage params invalid", src: oneStage("hello"), params: map[string]any{"who": 5.0}},
		{name: "two stages, the first failed", src: manifesttest.Line("two-stages-failed-visit")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.maxTurns > 0 {
				defer func(n int) { maxTurnsPerRun = n }(maxTurnsPerRun)
				maxTurnsPerRun = tc.maxTurns
			}
			var got [2]string
			for i, v := range []int{1, 2} {
				f := newFixture(t)
				in := lineInput(t, tc.src, tc.params)
				in.Version = v
				if tc.change != nil {
					tc.change(&in)
				}
				res, rec := f.runLine(t, in, nil)
				got[i] = fmt.Sprintf("%s %s runs %d\n%s", res.Status, maskedJSON(t, res.Failure), f.runs, maskedJSON(t, rec))
			}
			if got[0] != got[1] {
				t.Fatalf("input version 1:\n%s\ninput version 2:\n%s", got[0], got[1])
			}
		})
	}
}

// maskedJSON is v's JSON, masked.
func maskedJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return jsonOf(masked(m, ""))
}

// masked is a record's JSON without what differs between two runs of the
// same line: ids and times.
func masked(v any, key string) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			out[k] = masked(e, k)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = masked(e, key)
		}
		return out
	case string:
		if k := strings.ToLower(key); k == "id" || strings.HasSuffix(k, "_id") || strings.HasSuffix(k, "_at") {
			return key
		}
	}
	return v
}

// TestLineRunHeldWritesLocalActivities: with held writes a 3-stage line's
// manager writes its record in 4 local activities (one before the first
// stage, one between two stages, one at the end), not 12.
func TestLineRunHeldWritesLocalActivities(t *testing.T) {
	for _, c := range []struct{ version, want int }{{1, 12}, {2, 4}} {
		f := newFixture(t)
		in := lineInput(t, manifesttest.Line("three-stages"), map[string]any{"who": "x"})
		in.Version = c.version
		n := map[string]int{}
		res, rec := f.runLine(t, in, func(env *testsuite.TestWorkflowEnvironment) {
			env.SetOnLocalActivityStartedListener(func(info *activity.Info, _ context.Context, _ []any) {
				if info.WorkflowType.Name == LineRunWorkflowName {
					n[info.ActivityType.Name]++
				}
			})
		})
		total := 0
		for _, name := range managerWrites {
			total += n[name]
		}
		if res.Status != "succeeded" || len(rec.ManagerTurns) != 3 || total != c.want || (c.version == 2 && n["LineWrites"] != c.want) {
			t.Fatalf("input version %d: %s, %d turns, local activities %v (want %d)", c.version, res.Status, len(rec.ManagerTurns), n, c.want)
		}
	}
}
