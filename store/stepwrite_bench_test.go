package store_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/linefactory/linefactory/store"
	"github.com/linefactory/linefactory/store/storetest"
)

// benchDatabases are the stores the write benchmarks run on.
var benchDatabases = []struct {
	name string
	open func(testing.TB) *store.Store
}{{"sqlite", storetest.SQLite}, {"postgres", storetest.Postgres}}

// BenchmarkStepWrite: a job step's one write on its path (the previous
// step's end and its own start, activities.endAndMark), durable
// (UpdateJobRunSteps) and lazy (MarkJobRunSteps: on PostgreSQL a commit
// that does not wait for the disk), on SQLite and PostgreSQL.
func BenchmarkStepWrite(b *testing.B) {
	for _, db := range benchDatabases {
		b.Run(db.name, func(b *testing.B) {
			st := db.open(b)
			ctx := context.Background()
			const steps = 64
			timeline := make([]store.StepTimelineEntry, steps)
			for i := range timeline {
				timeline[i] = store.StepTimelineEntry{Name: fmt.Sprintf("s%d", i), TaskName: "t", Action: "exec", Status: "pending"}
			}
			for _, w := range []struct {
				name  string
				write func(context.Context, string, []store.StepChange) error
			}{{"durable", st.UpdateJobRunSteps}, {"lazy", st.MarkJobRunSteps}} {
				b.Run(w.name, func(b *testing.B) {
					var runID string
					for i := 0; i < b.N; i++ {
						s := i % steps
						if s == 0 {
							b.StopTimer()
							r, err := st.CreateJobRun(ctx, store.JobRun{JobName: "j", JobVersionID: "jv_1", Status: "running", StepTimeline: timeline})
							if err != nil {
								b.Fatal(err)
							}
							runID = r.ID
							b.StartTimer()
						}
						changes := []store.StepChange{{Task: "t", Step: fmt.Sprintf("s%d", s), Change: func(e *store.StepTimelineEntry) { e.Status = "running" }}}
						if s > 0 {
							changes = append(changes, store.StepChange{Task: "t", Step: fmt.Sprintf("s%d", s-1), Change: func(e *store.StepTimelineEntry) { e.Status = "succeeded" }})
						}
						if err := w.write(ctx, runID, changes); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		})
	}
}

// BenchmarkUpdateLineRun: one read-modify-write of a line run's record, as
// each of a line manager's record writes is (a turn appended here), on
// SQLite and PostgreSQL, with CPU per write reported.
func BenchmarkUpdateLineRun(b *testing.B) {
	for _, db := range benchDatabases {
		b.Run(db.name, func(b *testing.B) {
			st := db.open(b)
			ctx := context.Background()
			var runID string
			for i := 0; i < b.N; i++ {
				if i%16 == 0 { // a line run's record stays the size of a short run's
					b.StopTimer()
					r, err := st.CreateLineRun(ctx, store.LineRun{LineName: "l", Status: "running"})
					if err != nil {
						b.Fatal(err)
					}
					runID = r.ID
					b.StartTimer()
				}
				_, err := st.UpdateLineRun(ctx, runID, func(r *store.LineRun) error {
					r.ManagerTurns = append(r.ManagerTurns, store.ManagerTurn{WorkflowRunID: "wr", State: "visiting a"})
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkUpdateJobRun: the whole-record writes of a job run, on SQLite
// and PostgreSQL: start (StartRun: queued to running, its 20 timeline
// entries inserted) and finish (FinishRun: the last step's end written,
// the record ended; the others were written by the steps).
func BenchmarkUpdateJobRun(b *testing.B) {
	const steps = 20
	timeline := make([]store.StepTimelineEntry, steps)
	for i := range timeline {
		timeline[i] = store.StepTimelineEntry{Name: fmt.Sprintf("s%d", i), TaskName: "t", Action: "exec", Status: "pending"}
	}
	for _, db := range benchDatabases {
		b.Run(db.name, func(b *testing.B) {
			st := db.open(b)
			ctx := context.Background()
			for _, w := range []struct {
				name   string
				before store.JobRun
				change func(*store.JobRun) error
			}{
				{"start", store.JobRun{JobName: "j", JobVersionID: "jv_1", Status: "queued"}, func(r *store.JobRun) error {
					r.Status, r.StepTimeline = "running", append([]store.StepTimelineEntry(nil), timeline...)
					return nil
				}},
				{"finish", store.JobRun{JobName: "j", JobVersionID: "jv_1", Status: "running", StepTimeline: timeline}, func(r *store.JobRun) error {
					r.Status, r.StepTimeline[steps-1].Status = "succeeded", "succeeded"
					return nil
				}},
			} {
				b.Run(w.name, func(b *testing.B) {
					for i := 0; i < b.N; i++ {
						b.StopTimer()
						r, err := st.CreateJobRun(ctx, w.before)
						if err != nil {
							b.Fatal(err)
						}
						b.StartTimer()
						if _, err := st.UpdateJobRun(ctx, r.ID, w.change); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		})
	}
}

// BenchmarkCreateJobRun: a job run's record made (queued, before StartRun
// writes its timeline), as every POST /jobs/{name}/runs and every stage of
// a line makes one, on SQLite and PostgreSQL.
func BenchmarkCreateJobRun(b *testing.B) {
	for _, db := range benchDatabases {
		b.Run(db.name, func(b *testing.B) {
			st := db.open(b)
			ctx := context.Background()
			params := map[string]any{"branch": "main", "n": 3.0}
			for i := 0; i < b.N; i++ {
				if _, err := st.CreateJobRun(ctx, store.JobRun{JobName: "j", JobVersionID: "jv_1", Status: "queued", RunParams: params}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
