package api

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/linefactory/linefactory/manifests/run"
	"github.com/linefactory/linefactory/store"
	"github.com/linefactory/linefactory/store/storetest"
)

// BenchmarkReadPath: the API's cost per request of the reads by id issue
// 14 measures under load (GET /job-runs/{id} of a 20-step run, GET
// /factory/line-runs/{id}), in process, through
// the whole handler chain (request id, logging and metrics, auth with its
// token cache, the store query, the response) on both databases. Run with
// -cpuprofile to see where a request's time goes.
func BenchmarkReadPath(b *testing.B) {
	for _, db := range []string{"sqlite", "postgres"} {
		b.Run(db, func(b *testing.B) {
			ctx := context.Background()
			st, srv, secret := benchServer(b, db)
			var timeline []store.StepTimelineEntry
			for i := 0; i < 20; i++ {
				timeline = append(timeline, store.StepTimelineEntry{Name: fmt.Sprintf("step-%d", i+1), TaskName: "t", Action: "exec", Status: run.Succeeded})
			}
			jr, err := st.CreateJobRun(ctx, store.JobRun{JobName: "j", JobVersionID: "jv_1", Status: run.Succeeded, StepTimeline: timeline})
			if err != nil {
				b.Fatal(err)
			}
			lr, err := st.CreateLineRun(ctx, store.LineRun{LineName: "three", Status: run.Succeeded})
			if err != nil {
				b.Fatal(err)
			}
			for _, p := range []struct{ name, path string }{{"job-run", "/job-runs/" + jr.ID}, {"line-run", "/factory/line-runs/" + lr.ID}} {
				b.Run(p.name, func(b *testing.B) {
					b.ReportAllocs()
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							req := httptest.NewRequest(http.MethodGet, p.path, nil)
							req.Header.Set("Authorization", "Bearer "+secret)
							w := httptest.NewRecorder()
							srv.ServeHTTP(w, req)
							if w.Code != http.StatusOK {
								b.Fatalf("GET %s: %d %s", p.path, w.Code, w.Body)
							}
						}
					})
				})
			}
		})
	}
}

// benchServer is the API on a fresh store of db ("sqlite" or "postgres")
// with a read token, for the path benchmarks.
func benchServer(b *testing.B, db string) (*store.Store, *Server, string) {
	var st *store.Store
	if db == "postgres" {
		st = storetest.Postgres(b)
	} else {
		st = storetest.SQLite(b)
	}
	srv := New(Config{Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))}, st)
	secret := NewTokenSecret()
	if _, err := st.CreateToken(context.Background(), "bench", ScopeRead, HashToken(secret)); err != nil {
		b.Fatal(err)
	}
	return st, srv, secret
}
