package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/linefactory/linefactory/store"
	"github.com/linefactory/linefactory/store/storetest"
)

// TestUpdateJobRunStep: a step's entry is changed in place (by
// UpdateJobRunStep or MarkJobRunStep), concurrent
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
				update := st.UpdateJobRunStep
				if i%2 == 0 { // the write that need not wait for the disk
					update = st.MarkJobRunStep
				}
				err := update(ctx, r.ID, fmt.Sprintf("t%d", i%2), fmt.Sprintf("s%d", i), func(e *store.StepTimelineEntry) {
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

// TestUpdateJobRunStepSameEntry: concurrent changes of one entry (its
// start and end, the gateway's usage, a whole-run UpdateJobRun) all keep
// each other's: a change that lost the race is applied again to what won.
func TestUpdateJobRunStepSameEntry(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		r, err := st.CreateJobRun(ctx, store.JobRun{JobName: "j", JobVersionID: "jv_1", Status: "running",
			StepTimeline: []store.StepTimelineEntry{{Name: "s", TaskName: "t", Action: "exec", Status: "pending"}}})
		if err != nil {
			t.Fatal(err)
		}
		const n = 8
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				update := st.UpdateJobRunStep
				if i == 0 {
					update = st.MarkJobRunStep
				}
				err := update(ctx, r.ID, "t", "s", func(e *store.StepTimelineEntry) {
					e.Attempts = append(e.Attempts, store.StepAttempt{Attempt: i + 1})
				})
				if err != nil {
					t.Error(err)
				}
			}(i)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := st.UpdateJobRun(ctx, r.ID, func(r *store.JobRun) error {
				r.StepTimeline[0].TaskName, r.ComputeCostCents = "t", 3
				r.StepTimeline[0].Attempts = append(r.StepTimeline[0].Attempts, store.StepAttempt{Attempt: 100})
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		}()
		wg.Wait()
		got, err := st.GetJobRun(ctx, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[int]bool{}
		for _, a := range got.StepTimeline[0].Attempts {
			seen[a.Attempt] = true
		}
		if len(got.StepTimeline[0].Attempts) != n+1 || len(seen) != n+1 || !seen[100] || got.ComputeCostCents != 3 {
			t.Fatalf("changes lost: attempts %+v, cost %d", got.StepTimeline[0].Attempts, got.ComputeCostCents)
		}
	})
}

// TestJobRunJSONSplicesTimeline: GET by id's stored JSON, with the
// timeline spliced in from its rows, is the run GetJobRun decodes; a run
// without steps has an empty timeline; an entry changed by UpdateJobRun is
// rewritten, entries past a shorter timeline are gone; listings read the
// timelines unless told not to.
func TestJobRunJSONSplicesTimeline(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		r, err := st.CreateJobRun(ctx, store.JobRun{JobName: "j", JobVersionID: "jv_1", Status: "queued",
			RunParams: map[string]any{"step_timeline": []any{}, "x": "}"}})
		if err != nil {
			t.Fatal(err)
		}
		sameJSON(t, st, r.ID, 0)
		_, err = st.UpdateJobRun(ctx, r.ID, func(r *store.JobRun) error {
			for i := 0; i < 3; i++ {
				r.StepTimeline = append(r.StepTimeline, store.StepTimelineEntry{Name: fmt.Sprintf("s%d", i), TaskName: "t", Status: "pending"})
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		sameJSON(t, st, r.ID, 3)
		_, err = st.UpdateJobRun(ctx, r.ID, func(r *store.JobRun) error {
			r.StepTimeline = r.StepTimeline[:2]
			r.StepTimeline[1].Status = "running"
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		got := sameJSON(t, st, r.ID, 2)
		if got.StepTimeline[1].Status != "running" || got.StepTimeline[0].Status != "pending" {
			t.Fatalf("timeline %+v", got.StepTimeline)
		}
		for _, without := range []bool{false, true} {
			listed, err := st.ListJobRuns(ctx, store.JobRunFilter{JobName: "j", WithoutTimeline: without})
			if err != nil {
				t.Fatal(err)
			}
			found, err := st.SearchJobRuns(ctx, store.RunSearch{Name: "j", WithoutTimeline: without})
			if err != nil {
				t.Fatal(err)
			}
			want := 2
			if without {
				want = 0
			}
			for _, l := range [][]store.JobRun{listed, found} {
				if len(l) != 1 || len(l[0].StepTimeline) != want || l[0].StepTimeline == nil || l[0].RunParams["x"] != "}" {
					t.Fatalf("listed without timeline %v: %+v", without, l)
				}
			}
		}
		if _, err := st.GetJobRunJSON(ctx, "jr_missing"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("missing run: %v", err)
		}
	})
}

// sameJSON checks that GetJobRunJSON and GetJobRun agree on run id and that
// its timeline has n entries.
func sameJSON(t *testing.T, st *store.Store, id string, n int) store.JobRun {
	t.Helper()
	ctx := context.Background()
	raw, err := st.GetJobRunJSON(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	r, err := st.GetJobRun(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var fromRaw, fromRun map[string]any
	if err := json.Unmarshal(raw, &fromRaw); err != nil {
		t.Fatalf("%v: %s", err, raw)
	}
	b, _ := json.Marshal(r)
	_ = json.Unmarshal(b, &fromRun)
	if !reflect.DeepEqual(fromRaw, fromRun) {
		t.Fatalf("stored JSON\n%s\nrun\n%s", raw, b)
	}
	if len(r.StepTimeline) != n || r.StepTimeline == nil {
		t.Fatalf("timeline of %d entries, want %d: %s", len(r.StepTimeline), n, raw)
	}
	return r
}

// TestJobRunStepsMigration: a data directory from before job_run_steps
// (the timeline inside the run's document) reads the same after the
// migration moves the timeline out (once, also when several migrate at the
// same time), and its steps can be updated.
func TestJobRunStepsMigration(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		db := store.DBForTest(st)
		at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		legacy := store.JobRun{ID: "jr_legacy", JobName: "j", JobVersionID: "jv_1", Status: "running", CreatedAt: at,
			RunParams: map[string]any{}, ArtifactRefs: []map[string]any{}, KnowledgeVersions: []store.KnowledgeVersionRef{},
			StepTimeline: []store.StepTimelineEntry{
				{Name: "a", TaskName: "t", Status: "succeeded", StartedAt: &at},
				{Name: "b", TaskName: "t", Status: "pending"},
			}}
		plain := legacy
		plain.ID, plain.StepTimeline = "jr_plain", nil
		if err := db.Exec("DROP TABLE job_run_steps").Error; err != nil {
			t.Fatal(err)
		}
		for _, r := range []store.JobRun{legacy, plain} {
			doc, _ := json.Marshal(r)
			err := db.Exec("INSERT INTO job_runs (id, job_name, status, line_run_id, created_at, doc) VALUES (?, ?, ?, '', ?, ?)",
				r.ID, r.JobName, string(r.Status), r.CreatedAt, string(doc)).Error
			if err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		for i := 0; i < 3; i++ { // workers upgraded at once: one moves the timelines
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := store.MigrateJobRunStepsForTest(st); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		if err := store.MigrateForTest(st); err != nil { // and again: nothing left to do
			t.Fatal(err)
		}
		got := sameJSON(t, st, legacy.ID, 2)
		if got.StepTimeline[0].Name != "a" || got.StepTimeline[0].Status != "succeeded" || got.StepTimeline[1].Name != "b" {
			t.Fatalf("timeline %+v", got.StepTimeline)
		}
		sameJSON(t, st, plain.ID, 0)
		var doc string
		if err := db.Raw("SELECT CAST(doc AS TEXT) FROM job_runs WHERE id = ?", legacy.ID).Row().Scan(&doc); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(doc, "step_timeline") || !strings.Contains(doc, "jv_1") {
			t.Fatalf("stored document %s", doc)
		}
		if err := st.UpdateJobRunStep(ctx, legacy.ID, "t", "b", func(e *store.StepTimelineEntry) { e.Status = "running" }); err != nil {
			t.Fatal(err)
		}
		if got := sameJSON(t, st, legacy.ID, 2); got.StepTimeline[1].Status != "running" {
			t.Fatalf("timeline %+v", got.StepTimeline)
		}
	})
}

// BenchmarkJobRunStep: the store cost of one step (its start and its end,
// as RunStep records them: MarkJobRunStep, UpdateJobRunStep) in runs of 100 and 5,000 steps. It should not
// grow with the number of steps.
func BenchmarkJobRunStep(b *testing.B) {
	for _, db := range []string{"sqlite", "postgres"} {
		for _, n := range []int{100, 5000} {
			b.Run(fmt.Sprintf("%s/steps=%d", db, n), func(b *testing.B) {
				st := storetest.SQLite(b)
				if db == "postgres" {
					st = storetest.Postgres(b)
				}
				ctx := context.Background()
				timeline := make([]store.StepTimelineEntry, n)
				for i := range timeline {
					timeline[i] = store.StepTimelineEntry{Name: fmt.Sprintf("step-%d", i), TaskName: "t", Action: "exec", Status: "pending"}
				}
				r, err := st.CreateJobRun(ctx, store.JobRun{JobName: "j", JobVersionID: "jv_1", Status: "running", StepTimeline: timeline})
				if err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					step := timeline[i%n].Name
					now := time.Now()
					code := 0
					if err := st.MarkJobRunStep(ctx, r.ID, "t", step, func(e *store.StepTimelineEntry) {
						e.Status, e.StartedAt = "running", &now
					}); err != nil {
						b.Fatal(err)
					}
					if err := st.UpdateJobRunStep(ctx, r.ID, "t", step, func(e *store.StepTimelineEntry) {
						e.Status, e.CompletedAt, e.ExitCode = "succeeded", &now, &code
					}); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// TestUpdateJobRunSteps: several entries changed by one write (a step's
// start with the ends of the steps before it), each applied exactly once
// while other writers change the same entries concurrently; a step the run
// lacks is skipped; two tasks' entries of the same name are told apart.
func TestUpdateJobRunSteps(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		var timeline []store.StepTimelineEntry
		for _, task := range []string{"a", "b"} {
			for i := 0; i < 3; i++ {
				timeline = append(timeline, store.StepTimelineEntry{Name: fmt.Sprintf("s%d", i), TaskName: task, Action: "exec", Status: "pending"})
			}
		}
		r, err := st.CreateJobRun(ctx, store.JobRun{JobName: "j", JobVersionID: "jv_1", Status: "running", StepTimeline: timeline})
		if err != nil {
			t.Fatal(err)
		}
		appendAttempt := func(n int) func(*store.StepTimelineEntry) {
			return func(e *store.StepTimelineEntry) { e.Attempts = append(e.Attempts, store.StepAttempt{Attempt: n}) }
		}
		const writers = 6
		var wg sync.WaitGroup
		for i := 0; i < writers; i++ {
			wg.Add(2)
			go func(i int) {
				defer wg.Done()
				write := st.UpdateJobRunSteps
				if i%2 == 1 { // on PostgreSQL its lazy connections
					write = st.MarkJobRunSteps
				}
				err := write(ctx, r.ID, []store.StepChange{
					{Task: "a", Step: "s0", Change: appendAttempt(i + 1)},
					{Task: "a", Step: "s1", Change: appendAttempt(i + 1)},
					{Task: "a", Step: "nope", Change: appendAttempt(i + 1)},
				})
				if err != nil {
					t.Error(err)
				}
			}(i)
			go func(i int) { // the same entries, one at a time
				defer wg.Done()
				if err := st.UpdateJobRunStep(ctx, r.ID, "a", "s1", appendAttempt(100+i)); err != nil {
					t.Error(err)
				}
			}(i)
		}
		wg.Wait()
		got, err := st.GetJobRun(ctx, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		count := func(e store.StepTimelineEntry) map[int]int {
			c := map[int]int{}
			for _, a := range e.Attempts {
				c[a.Attempt]++
			}
			return c
		}
		for i, e := range got.StepTimeline {
			c := count(e)
			switch {
			case e.TaskName == "a" && e.Name == "s0":
				if len(e.Attempts) != writers {
					t.Fatalf("a/s0: %d changes applied, want %d: %+v", len(e.Attempts), writers, e.Attempts)
				}
			case e.TaskName == "a" && e.Name == "s1":
				if len(e.Attempts) != 2*writers {
					t.Fatalf("a/s1: %d changes applied, want %d: %+v", len(e.Attempts), 2*writers, e.Attempts)
				}
			default:
				if len(e.Attempts) != 0 {
					t.Fatalf("entry %d (%s/%s) changed: %+v", i, e.TaskName, e.Name, e.Attempts)
				}
			}
			for n, k := range c {
				if k != 1 {
					t.Fatalf("%s/%s: change %d applied %d times", e.TaskName, e.Name, n, k)
				}
			}
		}
		// More changes than one statement makes.
		var many []store.StepChange
		for _, task := range []string{"a", "b"} {
			for i := 0; i < 3; i++ {
				for k := 0; k < 3; k++ {
					many = append(many, store.StepChange{Task: task, Step: fmt.Sprintf("s%d", i), Change: appendAttempt(1000 + k)})
				}
			}
		}
		if err := st.UpdateJobRunSteps(ctx, r.ID, many); err != nil {
			t.Fatal(err)
		}
		got, err = st.GetJobRun(ctx, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range got.StepTimeline {
			c := count(e)
			if c[1000] != 1 || c[1001] != 1 || c[1002] != 1 {
				t.Fatalf("%s/%s after 18 changes: %+v", e.TaskName, e.Name, e.Attempts)
			}
		}
	})
}

// TestMarkJobRunStepsLazyCommit: on PostgreSQL MarkJobRunSteps's statement
// turns synchronous_commit off for its own transaction only: what it
// writes is read back at once and the connection keeps its setting (one
// connection, so the same one is asked).
func TestMarkJobRunStepsLazyCommit(t *testing.T) {
	base := os.Getenv(storetest.PostgresEnv)
	if base == "" {
		t.Skipf("SKIPPING PostgreSQL: %s is unset", storetest.PostgresEnv)
	}
	p := store.DefaultPool()
	p.MaxOpenConns, p.MaxIdleConns = 1, 1
	st, err := store.OpenPool(context.Background(), storetest.FreshSchema(t, base, "t"), p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	ctx := context.Background()
	r, err := st.CreateJobRun(ctx, store.JobRun{JobName: "j", JobVersionID: "jv_1", Status: "running",
		StepTimeline: []store.StepTimelineEntry{{Name: "s0", TaskName: "t", Status: "pending"}, {Name: "s1", TaskName: "t", Status: "pending"}}})
	if err != nil {
		t.Fatal(err)
	}
	err = st.MarkJobRunSteps(ctx, r.ID, []store.StepChange{
		{Task: "t", Step: "s0", Change: func(e *store.StepTimelineEntry) { e.Status = "succeeded" }},
		{Task: "t", Step: "s1", Change: func(e *store.StepTimelineEntry) { e.Status = "running" }},
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := st.GetJobRun(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.StepTimeline[0].Status != "succeeded" || got.StepTimeline[1].Status != "running" {
		t.Fatalf("timeline %+v", got.StepTimeline)
	}
	db, err := store.DBForTest(st).DB()
	if err != nil {
		t.Fatal(err)
	}
	var v string
	if err := db.QueryRowContext(ctx, "SHOW synchronous_commit").Scan(&v); err != nil || v != "on" {
		t.Fatalf("synchronous_commit after a lazy write: %q %v, want on", v, err)
	}
}
