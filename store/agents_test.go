package store_test

import (
	"context"
	"errors"
	"testing"

	"github.com/linefactory/linefactory/store"
	"github.com/linefactory/linefactory/store/storetest"
)

func TestSandboxSessions(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		if _, err := s.GetSandboxSession(ctx, "box@1", "main"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("unknown session: %v, want ErrNotFound", err)
		}
		if err := s.PutSandboxSession(ctx, "box@1", "main", "s1"); err != nil {
			t.Fatal(err)
		}
		if err := s.PutSandboxSession(ctx, "box@1", "main", "s2"); err != nil {
			t.Fatal(err)
		}
		if err := s.PutSandboxSession(ctx, "box@2", "main", "other"); err != nil {
			t.Fatal(err)
		}
		if id, err := s.GetSandboxSession(ctx, "box@1", "main"); err != nil || id != "s2" {
			t.Fatalf("session %q %v, want the replaced id s2", id, err)
		}
		if id, _ := s.GetSandboxSession(ctx, "box@2", "main"); id != "other" {
			t.Fatalf("another sandbox's session %q", id)
		}
	})
}

func TestJobRunKnowledgeVersionsRoundTrip(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		r, err := s.CreateJobRun(ctx, store.JobRun{JobName: "j", JobVersionID: "jv_1", Status: "queued"})
		if err != nil {
			t.Fatal(err)
		}
		if r.KnowledgeVersions == nil {
			t.Error("a new run's knowledge_versions is null, want []")
		}
		_, err = s.UpdateJobRun(ctx, r.ID, func(r *store.JobRun) error {
			r.KnowledgeVersions = []store.KnowledgeVersionRef{{Slug: "g", VersionID: "kv_1", VersionNumber: 3, ContentHash: "sha256:x"}}
			r.StepTimeline = []store.StepTimelineEntry{{Name: "s", InferenceCostCents: 7, Usage: []store.AgentUsage{{Model: "m", InputTokens: 1}}}}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.GetJobRun(ctx, r.ID)
		if err != nil || len(got.KnowledgeVersions) != 1 || got.KnowledgeVersions[0].VersionNumber != 3 ||
			got.StepTimeline[0].InferenceCostCents != 7 || got.StepTimeline[0].Usage[0].Model != "m" {
			t.Fatalf("round trip: %+v %v", got, err)
		}
	})
}
