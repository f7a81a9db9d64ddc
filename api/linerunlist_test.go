package api

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/linefactory/linefactory/manifests/run"
	"github.com/linefactory/linefactory/store"
	"github.com/linefactory/linefactory/store/storetest"
)

// TestLineRunListItems: the items the store cuts out of the stored
// documents are the runs as LineRunListItem shows them (no details, no
// webhook body), newest first.
func TestLineRunListItems(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		s := func(v string) *string { return &v }
		failed := run.StageFailed
		var runs []store.LineRun
		for i := 0; i < 2; i++ {
			r, err := st.CreateLineRun(ctx, store.LineRun{LineName: "l", Status: "failed", CreatedAt: now.Add(time.Duration(i) * time.Second), LineVersionID: s("lv_1"),
				Trigger:      store.TriggerSummary{Source: "webhook", Payload: map[string]any{"body": map[string]any{"x": 1.5}, "path": "p"}},
				RunParams:    map[string]any{"a": "b", "n": 1e21},
				Stages:       []store.LineRunStage{{StageName: "a", StageOrder: 1, Iteration: 1, Status: "failed", JobRunID: s("jr_1"), StartedAt: &now}},
				Transitions:  []store.TakenTransition{{ID: "t", From: "a", To: "b", Iteration: 1, TakenAt: now}},
				StageOutputs: map[string]map[string]any{"a": {"o": 1.0}}, WorkflowID: "linerun/x", RetryOf: s("lr_0"), StopReason: s("why"),
				Failure: &store.LineRunFailure{Code: &failed, Domain: "job"}, StartedAt: &now})
			if err != nil {
				t.Fatal(err)
			}
			runs = append(runs, r)
		}
		if _, err := st.CreateLineRun(ctx, store.LineRun{LineName: "other", Status: "queued"}); err != nil {
			t.Fatal(err)
		}
		var got []map[string]any
		items, err := st.ListLineRunsJSON(ctx, store.LineRunFilter{LineName: "l"})
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(jsonArray(items), &got); err != nil {
			t.Fatal(err)
		}
		var want []map[string]any
		for i := len(runs) - 1; i >= 0; i-- {
			want = append(want, decodeView(t, lineRunListItem(runs[i])))
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("list items\n got %v\nwant %v", got, want)
		}
	})
}
