package store_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/linefactory/linefactory/store"
	"github.com/linefactory/linefactory/store/storetest"
)

// TestUpdateJobRunStep: a step's entry is changed in place, concurrent
// changes of different entries (fanout tasks) and of the rest of the run
// are all kept, and an unknown step changes nothing.
func TestUpdateJobRunStep(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		var timeline []store.StepTimelineEntry
		for i := 0; i < 4; i++ {
			timeline = append(timeline, store.StepTimelineEntry{Name: fmt.Sprintf("s%d", i), TaskName: fmt.Sprintf("t%d", i%2), Action: "exec", Status: "queued"})
		}
		r, err := st.CreateJobRun(ctx, store.JobRun{JobName: "j", JobVersionID: "jv_1", Status: "running", StepTimeline: timeline,
			RunParams: map[string]any{"p": "v"}})
		if err != nil {
			t.Fatal(err)
		}
		at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		var wg sync.WaitGroup
		for i := 0; i < 4; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				code := i
				err := st.UpdateJobRunStep(ctx, r.ID, fmt.Sprintf("t%d", i%2), fmt.Sprintf("s%d", i), func(e *store.StepTimelineEntry) {
					e.Status, e.StartedAt, e.ExitCode = "succeeded", &at, &code
				})
				if err != nil {
					t.Error(err)
				}
			}(i)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := st.UpdateJobRun(ctx, r.ID, func(r *store.JobRun) error { r.ComputeCostCents = 7; return nil }); err != nil {
				t.Error(err)
			}
		}()
		wg.Wait()
		if err := st.UpdateJobRunStep(ctx, r.ID, "t0", "nope", func(e *store.StepTimelineEntry) { e.Status = "failed" }); err != nil {
			t.Fatal(err)
		}
		got, err := st.GetJobRun(ctx, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.ComputeCostCents != 7 || got.RunParams["p"] != "v" || len(got.StepTimeline) != 4 {
			t.Fatalf("run %+v", got)
		}
		for i, e := range got.StepTimeline {
			if e.Status != "succeeded" || e.ExitCode == nil || *e.ExitCode != i || e.StartedAt == nil || !e.StartedAt.Equal(at) || e.Name != fmt.Sprintf("s%d", i) {
				t.Fatalf("entry %d: %+v", i, e)
			}
		}
	})
}
