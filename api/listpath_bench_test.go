package api

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/linefactory/linefactory/manifests/run"
	"github.com/linefactory/linefactory/store"
)

// BenchmarkListPath: the API's cost per request of a page of 50 runs (GET
// /factory/lines/{name}/runs of 3-stage runs, GET /jobs/{name}/runs and GET
// /job-runs?job= of 20-step runs), in process through the whole handler
// chain, on both databases; BenchmarkReadPath's counterpart for listings.
func BenchmarkListPath(b *testing.B) {
	for _, db := range []string{"sqlite", "postgres"} {
		b.Run(db, func(b *testing.B) {
			ctx := context.Background()
			st, srv, secret := benchServer(b, db)
			if _, _, err := st.DeployJobVersion(ctx, "j", []byte(`{}`), "sha256:j"); err != nil {
				b.Fatal(err)
			}
			if _, _, err := st.DeployLineVersion(ctx, "three", []byte(`{}`), []byte(`{}`), "sha256:l"); err != nil {
				b.Fatal(err)
			}
			now := time.Now().UTC()
			var timeline []store.StepTimelineEntry
			for i := 0; i < 20; i++ {
				timeline = append(timeline, store.StepTimelineEntry{Name: fmt.Sprintf("step-%d", i+1), TaskName: "t", Action: "exec", Status: run.Succeeded,
					StartedAt: &now, CompletedAt: &now})
			}
			for i := 0; i < 60; i++ {
				if _, err := st.CreateJobRun(ctx, store.JobRun{JobName: "j", JobVersionID: "jv_1", Status: run.Succeeded, StepTimeline: timeline}); err != nil {
					b.Fatal(err)
				}
				var stages []store.LineRunStage
				for k, name := range []string{"a", "b", "c"} {
					jr := fmt.Sprintf("jr_%d_%d", i, k)
					stages = append(stages, store.LineRunStage{StageName: name, StageOrder: k + 1, Iteration: 1, Status: run.Succeeded,
						JobRunID: &jr, StartedAt: &now, CompletedAt: &now, CostRatedAt: &now})
				}
				if _, err := st.CreateLineRun(ctx, store.LineRun{LineName: "three", Status: run.Succeeded, Stages: stages,
					ManagerTurns: []store.ManagerTurn{{WorkflowRunID: "w", State: "completed", StartedAt: &now}},
					Transitions:  []store.TakenTransition{{ID: "ab", From: "a", To: "b", Iteration: 1, TakenAt: now}},
					StartedAt:    &now, CompletedAt: &now}); err != nil {
					b.Fatal(err)
				}
			}
			for _, p := range []string{"/factory/lines/three/runs", "/jobs/j/runs", "/job-runs?job=j"} {
				b.Run(p, func(b *testing.B) {
					b.ReportAllocs()
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							req := httptest.NewRequest(http.MethodGet, p, nil)
							req.Header.Set("Authorization", "Bearer "+secret)
							w := httptest.NewRecorder()
							srv.ServeHTTP(w, req)
							if w.Code != http.StatusOK {
								b.Fatalf("GET %s: %d %s", p, w.Code, w.Body)
							}
						}
					})
				})
			}
		})
	}
}
