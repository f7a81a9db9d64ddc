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
			t.Run("job run", func(t *testing.T) { checkJobRunCache(t, cached, other, uncached, ttl) })
			t.Run("line run", func(t *testing.T) { checkLineRunCache(t, cached, other, uncached, ttl) })
		})
	}
}

func checkJobRunCache(t *testing.T, cached, other, uncached *store.Store, ttl time.Duration) {
	ctx := context.Background()
	jr, err := cached.CreateJobRun(ctx, store.JobRun{JobName: "j", JobVersionID: "jv_1", Status: run.Queued,
		StepTimeline: []store.StepTimelineEntry{{Name: "s1", TaskName: "t", Status: "pending"}}})
	require.NoError(t, err)
	read := func(s *store.Store) store.JobRun {
		doc, err := s.GetJobRunJSON(ctx, jr.ID)
		require.NoError(t, err)
		var r store.JobRun
		require.NoError(t, json.Unmarshal(doc, &r))
		return r
	}
	set := func(s *store.Store, change func(*store.JobRun)) {
		_, err := s.UpdateJobRun(ctx, jr.ID, func(r *store.JobRun) error { change(r); return nil })
		require.NoError(t, err)
	}
	reason := func(r store.JobRun) string {
		if r.StopReason == nil {
			return ""
		}
		return *r.StopReason
	}
	require.Equal(t, run.Queued, read(cached).Status)
	set(other, func(r *store.JobRun) { r.Status = run.Running })
	require.Equal(t, run.Running, read(cached).Status, "a running run is read from the database")
	set(other, func(r *store.JobRun) { r.Status = run.Succeeded })
	require.Equal(t, run.Succeeded, read(cached).Status)
	late := "late"
	set(other, func(r *store.JobRun) { r.StopReason = &late })
	require.Equal(t, "", reason(read(cached)), "a finished run is served from memory")
	require.Equal(t, late, reason(read(uncached)), "TTL 0 reads the database")
	// This store's own writes, of the document or of a step, show at once.
	require.NoError(t, cached.UpdateJobRunStep(ctx, jr.ID, "t", "s1", func(e *store.StepTimelineEntry) { e.Status = "succeeded" }))
	got := read(cached)
	require.Equal(t, "succeeded", string(got.StepTimeline[0].Status))
	require.Equal(t, late, reason(got))
	own := "own"
	set(cached, func(r *store.JobRun) { r.StopReason = &own })
	require.Equal(t, own, reason(read(cached)))
	// Another process's write shows within the TTL.
	later := "later"
	set(other, func(r *store.JobRun) { r.StopReason = &later })
	require.Eventually(t, func() bool { return reason(read(cached)) == later }, 5*ttl, 10*time.Millisecond)
}

func checkLineRunCache(t *testing.T, cached, other, uncached *store.Store, ttl time.Duration) {
	ctx := context.Background()
	lr, err := cached.CreateLineRun(ctx, store.LineRun{LineName: "l", Status: run.Queued})
	require.NoError(t, err)
	read := func(s *store.Store) store.LineRun {
		doc, err := s.GetLineRunJSON(ctx, lr.ID)
		require.NoError(t, err)
		var r store.LineRun
		require.NoError(t, json.Unmarshal(doc, &r))
		return r
	}
	set := func(s *store.Store, change func(*store.LineRun)) {
		_, err := s.UpdateLineRun(ctx, lr.ID, func(r *store.LineRun) error { change(r); return nil })
		require.NoError(t, err)
	}
	reason := func(r store.LineRun) string {
		if r.StopReason == nil {
			return ""
		}
		return *r.StopReason
	}
	require.Equal(t, run.Queued, read(cached).Status)
	set(other, func(r *store.LineRun) { r.Status = run.Running })
	require.Equal(t, run.Running, read(cached).Status, "a running run is read from the database")
	set(other, func(r *store.LineRun) { r.Status = run.Failed })
	require.Equal(t, run.Failed, read(cached).Status)
	late := "late"
	set(other, func(r *store.LineRun) { r.StopReason = &late })
	require.Equal(t, "", reason(read(cached)), "a finished run is served from memory")
	require.Equal(t, late, reason(read(uncached)), "TTL 0 reads the database")
	own := "own"
	set(cached, func(r *store.LineRun) { r.StopReason = &own })
	require.Equal(t, own, reason(read(cached)), "this store's own write shows at once")
	later := "later"
	set(other, func(r *store.LineRun) { r.StopReason = &later })
	require.Eventually(t, func() bool { return reason(read(cached)) == later }, 5*ttl, 10*time.Millisecond)
}
