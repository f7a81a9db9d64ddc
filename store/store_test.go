package store_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/linefactory/linefactory/manifests/run"
	"github.com/linefactory/linefactory/store"
	"github.com/linefactory/linefactory/store/storetest"
)

var ctx = context.Background()

func manifest(i int) json.RawMessage { return json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)) }

func TestDeployVersioning(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, s *store.Store) {
		v1, created, err := s.DeployJobVersion(ctx, "build", manifest(1), "sha256:1")
		if err != nil || !created || v1.VersionNumber != 1 || !strings.HasPrefix(v1.ID, "jv_") {
			t.Fatalf("first deploy: %+v created=%v err=%v", v1, created, err)
		}
		again, created, err := s.DeployJobVersion(ctx, "build", manifest(1), "sha256:1")
		if err != nil || created || again.ID != v1.ID {
			t.Fatalf("identical redeploy: %+v created=%v err=%v, want version 1 unchanged", again, created, err)
		}
		v2, created, err := s.DeployJobVersion(ctx, "build", manifest(2), "sha256:2")
		if err != nil || !created || v2.VersionNumber != 2 {
			t.Fatalf("changed deploy: %+v created=%v err=%v", v2, created, err)
		}
		if string(v2.Manifest) != `{"n":2}` {
			t.Fatalf("manifest round trip: %s", v2.Manifest)
		}
		job, err := s.GetJob(ctx, "build")
		if err != nil || job.LatestVersionNumber == nil || *job.LatestVersionNumber != 2 {
			t.Fatalf("job: %+v err=%v", job, err)
		}
		vs, err := s.ListJobVersions(ctx, "build", 50, 0)
		if err != nil || len(vs) != 2 || vs[0].VersionNumber != 2 {
			t.Fatalf("versions newest first: %+v err=%v", vs, err)
		}
		if got, err := s.GetJobVersion(ctx, "build", v1.ID); err != nil || got.VersionNumber != 1 {
			t.Fatalf("get version: %+v %v", got, err)
		}
		if _, err := s.GetJobVersion(ctx, "other", v1.ID); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("version of another job: err = %v, want ErrNotFound", err)
		}
		if _, err := s.GetJob(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("missing job: err = %v", err)
		}
		lv, created, err := s.DeployLineVersion(ctx, "flow", manifest(1), json.RawMessage(`[]`), "sha256:1")
		if err != nil || !created || lv.VersionNumber != 1 || !strings.HasPrefix(lv.ID, "lv_") || string(lv.InputParams) != `[]` {
			t.Fatalf("line deploy: %+v %v", lv, err)
		}
	})
}

func TestConcurrentDeploys(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, s *store.Store) {
		const n = 20
		var wg sync.WaitGroup
		nums := make([]int, n)
		errs := make([]error, n)
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				v, _, err := s.DeployJobVersion(ctx, "par", manifest(i), fmt.Sprintf("sha256:%d", i))
				nums[i], errs[i] = v.VersionNumber, err
			}(i)
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		sort.Ints(nums)
		for i, got := range nums {
			if got != i+1 {
				t.Fatalf("version numbers %v, want 1..%d with no gaps or duplicates", nums, n)
			}
		}
		// Identical concurrent deploys make one version.
		ids := make([]string, 8)
		for i := range ids {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				v, _, err := s.DeployJobVersion(ctx, "same", manifest(0), "sha256:same")
				if err != nil {
					t.Error(err)
				}
				ids[i] = v.ID
			}(i)
		}
		wg.Wait()
		for _, id := range ids {
			if id != ids[0] {
				t.Fatalf("identical deploys gave different versions: %v", ids)
			}
		}
	})
}

func TestListPagination(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, s *store.Store) {
		for _, name := range []string{"c", "a", "b"} {
			if _, _, err := s.DeployJobVersion(ctx, name, manifest(1), "sha256:x"); err != nil {
				t.Fatal(err)
			}
		}
		page, err := s.ListJobs(ctx, 2, 1)
		if err != nil || len(page) != 2 || page[0].Name != "b" || page[1].Name != "c" {
			t.Fatalf("page: %+v %v", page, err)
		}
	})
}

func TestKnowledge(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, s *store.Store) {
		v := store.KnowledgeVersion{Identifier: "guide", Type: "prompt", Level: "procedural", Format: "markdown", Body: "hi",
			Metadata: map[string]any{"k": "v"}, Links: []store.KnowledgeLink{{LinkType: "tag", Value: "x"}}, ContentHash: "sha256:a", ByteSize: 2}
		v1, err := s.CreateKnowledge(ctx, v)
		if err != nil || v1.VersionNumber != 1 || !strings.HasPrefix(v1.ID, "kv_") || v1.Links[0].Value != "x" || v1.Metadata["k"] != "v" {
			t.Fatalf("create: %+v %v", v1, err)
		}
		if _, err := s.CreateKnowledge(ctx, v); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("duplicate identifier: err = %v, want ErrConflict", err)
		}
		same, created, err := s.AddKnowledgeVersion(ctx, v)
		if err != nil || created || same.ID != v1.ID {
			t.Fatalf("identical version: %+v created=%v %v", same, created, err)
		}
		v.Body, v.ContentHash = "hello", "sha256:b"
		v2, created, err := s.AddKnowledgeVersion(ctx, v)
		if err != nil || !created || v2.VersionNumber != 2 {
			t.Fatalf("second version: %+v %v", v2, err)
		}
		item, latest, err := s.GetKnowledge(ctx, "guide")
		if err != nil || item.LatestVersionNumber != 2 || latest.Body != "hello" {
			t.Fatalf("get: %+v %+v %v", item, latest, err)
		}
		if _, err := s.GetKnowledgeVersion(ctx, "guide", 3); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("missing version: %v", err)
		}
		v.Identifier = "missing"
		if _, _, err := s.AddKnowledgeVersion(ctx, v); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("version of a missing item: %v", err)
		}
	})
}

func TestTokens(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, s *store.Store) {
		if _, err := s.CreateToken(ctx, "ci", "write", "abc123"); err != nil {
			t.Fatal(err)
		}
		tok, err := s.FindTokenByHash(ctx, "abc123")
		if err != nil || tok.Name != "ci" || tok.Scope != "write" {
			t.Fatalf("find: %+v %v", tok, err)
		}
		if _, err := s.FindTokenByHash(ctx, "abc124"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("wrong hash: %v", err)
		}
		if _, err := s.CreateToken(ctx, "ci", "read", "zzz"); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("duplicate name: %v", err)
		}
	})
}

func TestJobRunsConcurrentUpdates(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, s *store.Store) {
		r, err := s.CreateJobRun(ctx, store.JobRun{JobName: "build", JobVersionID: "jv_1", Status: "queued", RunParams: map[string]any{"a": 1.0}})
		if err != nil || !strings.HasPrefix(r.ID, "jr_") {
			t.Fatalf("create: %+v %v", r, err)
		}
		var wg sync.WaitGroup
		for i := 0; i < 10; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				_, err := s.UpdateJobRun(ctx, r.ID, func(r *store.JobRun) error {
					r.StepTimeline = append(r.StepTimeline, store.StepTimelineEntry{Name: fmt.Sprint(i), Status: "succeeded"})
					return nil
				})
				if err != nil {
					t.Error(err)
				}
			}(i)
		}
		wg.Wait()
		got, err := s.GetJobRun(ctx, r.ID)
		if err != nil || len(got.StepTimeline) != 10 {
			t.Fatalf("after 10 concurrent appends: %d entries, err %v", len(got.StepTimeline), err)
		}
		if _, err := s.UpdateJobRun(ctx, r.ID, func(r *store.JobRun) error { r.Status = "running"; return nil }); err != nil {
			t.Fatal(err)
		}
		runs, err := s.ListJobRuns(ctx, store.JobRunFilter{JobName: "build", Status: "running"})
		if err != nil || len(runs) != 1 || runs[0].RunParams["a"] != 1.0 {
			t.Fatalf("list by status: %+v %v", runs, err)
		}
		if _, err := s.GetJobRun(ctx, "jr_nope"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("missing run: %v", err)
		}
	})
}

func TestStepLogsCap(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, s *store.Store) {
		big := bytes.Repeat([]byte("x"), store.MaxStepLogBytes-10)
		for _, chunk := range [][]byte{big, []byte("0123456789abcdef"), []byte("dropped")} {
			if err := s.AppendStepLog(ctx, "jr_1", "t/s", "stdout", chunk); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.AppendStepLog(ctx, "jr_1", "t/s", "stderr", []byte("err")); err != nil {
			t.Fatal(err)
		}
		chunks, err := s.ReadStepLogs(ctx, "jr_1", "", 0)
		if err != nil || len(chunks) != 3 {
			t.Fatalf("chunks: %d %v", len(chunks), err)
		}
		var out []byte
		for _, c := range chunks[:2] {
			out = append(out, c.Data...)
		}
		if !strings.HasSuffix(string(out), "0123456789"+store.TruncationMarker) {
			t.Fatalf("stdout does not end with the kept bytes and the marker: %q", out[len(out)-40:])
		}
		after, _ := s.ReadStepLogs(ctx, "jr_1", "", chunks[1].Seq)
		if len(after) != 1 || string(after[0].Data) != "err" {
			t.Fatalf("read after seq: %+v", after)
		}
	})
}

func TestLineRunsAndSchedules(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, s *store.Store) {
		d := "d-1"
		r, err := s.CreateLineRun(ctx, store.LineRun{LineName: "flow", Status: "queued", Trigger: store.TriggerSummary{Source: "webhook", DeliveryID: &d}})
		if err != nil || !strings.HasPrefix(r.ID, "lr_") {
			t.Fatal(err)
		}
		found, err := s.FindLineRunsByDelivery(ctx, "webhook", "d-1")
		if err != nil || len(found) != 1 || found[0].ID != r.ID {
			t.Fatalf("by delivery: %+v %v", found, err)
		}
		if _, err := s.UpdateLineRun(ctx, r.ID, func(r *store.LineRun) error {
			r.Status = run.Failed
			r.Failure = &store.LineRunFailure{Code: new(run.NoRoute), Domain: run.DomainConfig}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		got, _ := s.ListLineRuns(ctx, store.LineRunFilter{LineName: "flow"})
		if len(got) != 1 || got[0].Failure == nil || *got[0].Failure.Code != "no_route" {
			t.Fatalf("list: %+v", got)
		}
		sc, err := s.UpsertLineSchedule(ctx, store.LineSchedule{LineName: "flow", Cron: "0 * * * *", Timezone: "UTC", Enabled: true})
		if err != nil || sc.ScheduleGeneration != 1 {
			t.Fatalf("create schedule: %+v %v", sc, err)
		}
		sc, _ = s.UpsertLineSchedule(ctx, store.LineSchedule{LineName: "flow", Cron: "0 * * * *", Timezone: "UTC", Enabled: true})
		if sc.ScheduleGeneration != 1 {
			t.Fatalf("unchanged upsert bumped generation to %d", sc.ScheduleGeneration)
		}
		sc, _ = s.UpsertLineSchedule(ctx, store.LineSchedule{LineName: "flow", Cron: "5 * * * *", Timezone: "UTC", Enabled: false, Inputs: map[string]any{"a": "b"}})
		if sc.ScheduleGeneration != 2 || sc.Enabled || sc.Inputs["a"] != "b" {
			t.Fatalf("changed schedule: %+v", sc)
		}
		if err := s.DeleteLineSchedule(ctx, "flow"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.GetLineSchedule(ctx, "flow"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("deleted schedule: %v", err)
		}
	})
}

func TestLineRunDeliveryIsUnique(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, s *store.Store) {
		d := "d-unique"
		run := func(line string) store.LineRun {
			return store.LineRun{LineName: line, Status: "queued", Trigger: store.TriggerSummary{Source: "webhook", DeliveryID: &d}}
		}
		if _, err := s.CreateLineRun(ctx, run("a")); err != nil {
			t.Fatal(err)
		}
		if _, err := s.CreateLineRun(ctx, run("a")); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("second run of line a for one delivery: got %v, want ErrConflict", err)
		}
		if _, err := s.CreateLineRun(ctx, run("b")); err != nil {
			t.Fatalf("another line, same delivery: %v", err)
		}
		other := run("a")
		other.Trigger.Source = "integration"
		if _, err := s.CreateLineRun(ctx, other); err != nil {
			t.Fatalf("another source, same delivery: %v", err)
		}
		// A retry carries the delivery's trigger but was not started by it.
		retry := run("a")
		prev := "lr_prev"
		retry.RetryOf = &prev
		if _, err := s.CreateLineRun(ctx, retry); err != nil {
			t.Fatalf("retry of a delivered run: %v", err)
		}
		for i := 0; i < 2; i++ {
			if _, err := s.CreateLineRun(ctx, store.LineRun{LineName: "a", Status: "queued", Trigger: store.TriggerSummary{Source: "manual"}}); err != nil {
				t.Fatalf("manual run %d: %v", i, err)
			}
		}
		found, err := s.FindLineRunsByDelivery(ctx, "webhook", d)
		if err != nil || len(found) != 2 {
			t.Fatalf("runs of the delivery: %d %v, want a and b", len(found), err)
		}
		// A CreatedAt the caller sets is kept.
		at := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
		r, err := s.CreateLineRun(ctx, store.LineRun{LineName: "c", Status: "failed", CreatedAt: at})
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.GetLineRun(ctx, r.ID)
		if err != nil || !got.CreatedAt.Equal(at) {
			t.Fatalf("created_at %v %v, want %v", got.CreatedAt, err, at)
		}
	})
}

// TestLineRunListingFollowsWrites: the listing's items (on PostgreSQL the
// generated list_doc column) show a run as it was last written, also for
// runs stored before the column existed (an upgraded database).
func TestLineRunListingFollowsWrites(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, s *store.Store) {
		item := func(line string) map[string]any {
			t.Helper()
			items, err := s.ListLineRunsJSON(ctx, store.LineRunFilter{LineName: line})
			if err != nil || len(items) != 1 {
				t.Fatalf("list %s: %d items, %v", line, len(items), err)
			}
			var m map[string]any
			if err := json.Unmarshal(items[0], &m); err != nil {
				t.Fatal(err)
			}
			return m
		}
		r, err := s.CreateLineRun(ctx, store.LineRun{LineName: "flow", Status: "queued", Trigger: store.TriggerSummary{Source: "manual"}})
		if err != nil {
			t.Fatal(err)
		}
		if got := item("flow"); got["status"] != "queued" || got["id"] != r.ID {
			t.Fatalf("created: %v", got)
		}
		if _, err := s.UpdateLineRun(ctx, r.ID, func(r *store.LineRun) error {
			r.Status = run.Running
			r.Transitions = []store.TakenTransition{{ID: "ab", From: "a", To: "b", Iteration: 1}}
			r.Stages = []store.LineRunStage{{StageName: "a", StageOrder: 1, Iteration: 1, Status: run.Succeeded}}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		got := item("flow")
		if _, ok := got["transitions"]; ok || got["status"] != "running" || len(got["stages"].([]any)) != 1 {
			t.Fatalf("updated: %v", got)
		}
		if !s.IsPostgres() {
			return
		}
		// A database from before list_doc: the migration adds the column
		// and fills it for the runs already stored.
		db := store.DBForTest(s)
		if err := db.Exec("ALTER TABLE line_runs DROP COLUMN list_doc").Error; err != nil {
			t.Fatal(err)
		}
		if _, err := s.CreateLineRun(ctx, store.LineRun{LineName: "old", Status: "failed", Trigger: store.TriggerSummary{Source: "manual"},
			Transitions: []store.TakenTransition{{ID: "ab", From: "a", To: "b", Iteration: 1}}}); err != nil {
			t.Fatal(err)
		}
		if err := store.MigrateForTest(s); err != nil {
			t.Fatal(err)
		}
		if got := item("old"); got["status"] != "failed" || got["transitions"] != nil {
			t.Fatalf("after the migration: %v", got)
		}
		if err := store.MigrateForTest(s); err != nil { // and again: nothing to do
			t.Fatal(err)
		}
		if got := item("flow"); got["status"] != "running" {
			t.Fatalf("after migrating twice: %v", got)
		}
	})
}

// UpdateLineRun's contract, on both databases: an unknown run is
// ErrNotFound, a change that fails leaves the run as it was and its error
// reaches the caller, concurrent changes all land (each read-modify-write
// sees the one before), and the status column follows the document (the
// listings filter on it).
func TestUpdateLineRunContract(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, s *store.Store) {
		if _, err := s.UpdateLineRun(ctx, "lr_missing", func(*store.LineRun) error { return nil }); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("unknown run: %v, want ErrNotFound", err)
		}
		r, err := s.CreateLineRun(ctx, store.LineRun{LineName: "contract", Status: run.Queued})
		if err != nil {
			t.Fatal(err)
		}
		boom := errors.New("boom")
		if _, err := s.UpdateLineRun(ctx, r.ID, func(r *store.LineRun) error {
			r.Status = run.Failed
			return boom
		}); !errors.Is(err, boom) {
			t.Fatalf("failing change: %v, want its error", err)
		}
		if got, err := s.GetLineRun(ctx, r.ID); err != nil || got.Status != run.Queued {
			t.Fatalf("after a failing change: status %s, %v, want it queued still", got.Status, err)
		}
		const writers = 8
		var wg sync.WaitGroup
		for i := 0; i < writers; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := s.UpdateLineRun(ctx, r.ID, func(r *store.LineRun) error {
					r.Status = run.Running
					r.ManagerTurns = append(r.ManagerTurns, store.ManagerTurn{State: "visiting"})
					return nil
				}); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		got, err := s.GetLineRun(ctx, r.ID)
		if err != nil || got.Status != run.Running || len(got.ManagerTurns) != writers {
			t.Fatalf("after %d concurrent changes: status %s, %d turns, %v", writers, got.Status, len(got.ManagerTurns), err)
		}
		listed, err := s.ListLineRuns(ctx, store.LineRunFilter{LineName: "contract", Status: run.Running})
		if err != nil || len(listed) != 1 {
			t.Fatalf("listed by status: %d runs, %v", len(listed), err)
		}
	})
}

// TestJobRunWritesContract: CreateJobRun and UpdateJobRun (below GORM,
// writeTx): a second run with an id taken is ErrConflict (a line manager's
// retried stage start relies on it); an unknown run is ErrNotFound, a
// failing change returns its error with nothing written; the status and
// line_run_id columns the listings filter on follow the record; a timeline
// longer than one insert batch is stored whole.
func TestJobRunWritesContract(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, s *store.Store) {
		taken := store.JobRun{ID: "jr_contract_taken", JobName: "contract", JobVersionID: "jv_1", Status: run.Queued}
		if _, err := s.CreateJobRun(ctx, taken); err != nil {
			t.Fatal(err)
		}
		if _, err := s.CreateJobRun(ctx, taken); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("second run with id %s: %v, want ErrConflict", taken.ID, err)
		}
		if _, err := s.UpdateJobRun(ctx, "jr_missing", func(*store.JobRun) error { return nil }); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("unknown run: %v, want ErrNotFound", err)
		}
		r, err := s.CreateJobRun(ctx, store.JobRun{JobName: "contract", JobVersionID: "jv_1", Status: run.Queued,
			StepTimeline: []store.StepTimelineEntry{{Name: "s", TaskName: "t", Status: run.Pending}}})
		if err != nil {
			t.Fatal(err)
		}
		boom := errors.New("boom")
		if _, err := s.UpdateJobRun(ctx, r.ID, func(r *store.JobRun) error {
			r.Status, r.StepTimeline = run.Failed, nil
			return boom
		}); !errors.Is(err, boom) {
			t.Fatalf("failing change: %v, want its error", err)
		}
		if got, err := s.GetJobRun(ctx, r.ID); err != nil || got.Status != run.Queued || len(got.StepTimeline) != 1 {
			t.Fatalf("after a failing change: %+v, %v, want it as it was", got, err)
		}
		const entries = 1001 // past one multi-row insert
		lr := "lr_contract"
		if _, err := s.UpdateJobRun(ctx, r.ID, func(r *store.JobRun) error {
			r.Status, r.LineRunID = run.Running, &lr
			for i := len(r.StepTimeline); i < entries; i++ {
				r.StepTimeline = append(r.StepTimeline, store.StepTimelineEntry{Name: fmt.Sprintf("s%d", i), TaskName: "t", Status: run.Pending})
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		listed, err := s.ListJobRuns(ctx, store.JobRunFilter{LineRunID: lr, Status: run.Running})
		if err != nil || len(listed) != 1 || len(listed[0].StepTimeline) != entries || listed[0].StepTimeline[entries-1].Name != fmt.Sprintf("s%d", entries-1) {
			t.Fatalf("listed by line run and status: %d runs, %v", len(listed), err)
		}
	})
}
