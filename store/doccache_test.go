package store_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/linefactory/linefactory/manifests/run"
	"github.com/linefactory/linefactory/store"
	"github.com/linefactory/linefactory/store/storetest"
)

// TestFinishedRunCache: a finished run's document is served from memory
// for the pool's FinishedRunCacheTTL, a running run's never; this store's
// own writes show at once, another process's (a second store on the same
// database) within the TTL; with a TTL of 0 every read goes to the
// database.
func TestFinishedRunCache(t *testing.T) {
	dsns := map[string]func(t *testing.T) string{
		"sqlite": func(t *testing.T) string { return filepath.Join(t.TempDir(), "factory.db") },
		"postgres": func(t *testing.T) string {
			base := os.Getenv(storetest.PostgresEnv)
			if base == "" {
				t.Skipf("SKIPPING PostgreSQL: %s is unset", storetest.PostgresEnv)
			}
			return storetest.FreshSchema(t, base, "t")
		},
	}
	for name, dsn := range dsns {
		t.Run(name, func(t *testing.T) {
			d := dsn(t)
			open := func(ttl time.Duration) *store.Store {
				p := store.DefaultPool()
				p.FinishedRunCacheTTL = ttl
				s, err := store.OpenPool(context.Background(), d, p)
				require.NoError(t, err)
				t.Cleanup(func() { _ = s.Close() })
				return s
			}
			const ttl = 400 * time.Millisecond
			cached, other, uncached := open(ttl), open(0), open(0)
			t.Run("job run", func(t *testing.T) { checkRunCache(t, cached, other, uncached, ttl, jobRunOps(t)) })
			t.Run("line run", func(t *testing.T) { checkRunCache(t, cached, other, uncached, ttl, lineRunOps(t)) })
		})
	}
}

// runOps are what checkRunCache does with a kind of run R.
type runOps[R any] struct {
	create func(*store.Store) string // a queued run
	read   func(*store.Store, string) (json.RawMessage, error)
	update func(*store.Store, string, func(*R)) error
	status func(*R) *run.Status
	reason func(*R) **string // the stop reason, a field any write may set
	// ownWrite is another write of this store than update, whose change
	// shows at once (nil: none).
	ownWrite func(*store.Store, string)
}

func checkRunCache[R any](t *testing.T, cached, other, uncached *store.Store, ttl time.Duration, ops runOps[R]) {
	id := ops.create(cached)
	read := func(s *store.Store) R {
		doc, err := ops.read(s, id)
		require.NoError(t, err)
		var r R
		require.NoError(t, json.Unmarshal(doc, &r))
		return r
	}
	set := func(s *store.Store, change func(*R)) { require.NoError(t, ops.update(s, id, change)) }
	setReason := func(s *store.Store, v string) { set(s, func(r *R) { *ops.reason(r) = &v }) }
	reason := func(r R) string {
		if p := *ops.reason(&r); p != nil {
			return *p
		}
		return ""
	}
	status := func(r R) run.Status { return *ops.status(&r) }
	require.Equal(t, run.Queued, status(read(cached)))
	set(other, func(r *R) { *ops.status(r) = run.Running })
	require.Equal(t, run.Running, status(read(cached)), "a running run is read from the database")
	set(other, func(r *R) { *ops.status(r) = run.Failed })
	require.Equal(t, run.Failed, status(read(cached)))
	setReason(other, "late")
	require.Equal(t, "", reason(read(cached)), "a finished run is served from memory")
	require.Equal(t, "late", reason(read(uncached)), "TTL 0 reads the database")
	if ops.ownWrite != nil {
		ops.ownWrite(cached, id)
		require.Equal(t, "late", reason(read(cached)), "this store's own write shows at once, and all it read")
	}
	setReason(cached, "own")
	require.Equal(t, "own", reason(read(cached)), "this store's own write shows at once")
	// Another process's write shows within the TTL.
	setReason(other, "later")
	require.Eventually(t, func() bool { return reason(read(cached)) == "later" }, 5*ttl, 10*time.Millisecond)
}

func jobRunOps(t *testing.T) runOps[store.JobRun] {
	ctx := context.Background()
	return runOps[store.JobRun]{
		create: func(s *store.Store) string {
			jr, err := s.CreateJobRun(ctx, store.JobRun{JobName: "j", JobVersionID: "jv_1", Status: run.Queued,
				StepTimeline: []store.StepTimelineEntry{{Name: "s1", TaskName: "t", Status: "pending"}}})
			require.NoError(t, err)
			return jr.ID
		},
		read: func(s *store.Store, id string) (json.RawMessage, error) { return s.GetJobRunJSON(ctx, id) },
		update: func(s *store.Store, id string, change func(*store.JobRun)) error {
			_, err := s.UpdateJobRun(ctx, id, func(r *store.JobRun) error { change(r); return nil })
			return err
		},
		status: func(r *store.JobRun) *run.Status { return &r.Status },
		reason: func(r *store.JobRun) **string { return &r.StopReason },
		ownWrite: func(s *store.Store, id string) { // a step's write
			require.NoError(t, s.UpdateJobRunStep(ctx, id, "t", "s1", func(e *store.StepTimelineEntry) { e.Status = "succeeded" }))
			doc, err := s.GetJobRunJSON(ctx, id)
			require.NoError(t, err)
			var r store.JobRun
			require.NoError(t, json.Unmarshal(doc, &r))
			require.Equal(t, "succeeded", string(r.StepTimeline[0].Status), "a step write shows at once")
		},
	}
}

func lineRunOps(t *testing.T) runOps[store.LineRun] {
	ctx := context.Background()
	return runOps[store.LineRun]{
		create: func(s *store.Store) string {
			lr, err := s.CreateLineRun(ctx, store.LineRun{LineName: "l", Status: run.Queued})
			require.NoError(t, err)
			return lr.ID
		},
		read: func(s *store.Store, id string) (json.RawMessage, error) { return s.GetLineRunJSON(ctx, id) },
		update: func(s *store.Store, id string, change func(*store.LineRun)) error {
			_, err := s.UpdateLineRun(ctx, id, func(r *store.LineRun) error { change(r); return nil })
			return err
		},
		status: func(r *store.LineRun) *run.Status { return &r.Status },
		reason: func(r *store.LineRun) **string { return &r.StopReason },
	}
}
