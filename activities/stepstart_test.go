package activities

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/linefactory/linefactory/activities/sandbox"
	"github.com/linefactory/linefactory/manifests"
	"github.com/linefactory/linefactory/manifests/run"
	"github.com/linefactory/linefactory/store"
	"github.com/linefactory/linefactory/store/storetest"
)

// ranDriver is a sandbox driver whose commands succeed at once and say so
// on ran.
type ranDriver struct {
	sandbox.Driver
	ran chan struct{}
}

func (d *ranDriver) Get(_ context.Context, name string) (sandbox.Sandbox, error) {
	return sandbox.Sandbox{Name: name}, nil
}

func (d *ranDriver) Exec(context.Context, sandbox.ExecRequest) (sandbox.ExecResult, error) {
	close(d.ran)
	return sandbox.ExecResult{}, nil
}

// slowStartStore is a runStore with step writes whose start write lands
// only once the command has run.
type slowStartStore struct {
	*runStore
	ran          chan struct{}
	heldCommand  atomic.Bool
	updatesFirst atomic.Bool
	marked       atomic.Bool
}

func (s *slowStartStore) patch(id, task, step string, change func(*store.StepTimelineEntry)) error {
	_, err := s.UpdateJobRun(context.Background(), id, func(r *store.JobRun) error {
		for i := range r.StepTimeline {
			if e := &r.StepTimeline[i]; e.TaskName == task && e.Name == step {
				change(e)
			}
		}
		return nil
	})
	return err
}

func (s *slowStartStore) MarkJobRunStep(_ context.Context, id, task, step string, change func(*store.StepTimelineEntry)) error {
	select {
	case <-s.ran:
	case <-time.After(30 * time.Second): // a bound, not a timing: the command waited for this write
		s.heldCommand.Store(true)
	}
	defer s.marked.Store(true)
	return s.patch(id, task, step, change)
}

func (s *slowStartStore) UpdateJobRunStep(_ context.Context, id, task, step string, change func(*store.StepTimelineEntry)) error {
	if !s.marked.Load() {
		s.updatesFirst.Store(true)
	}
	return s.patch(id, task, step, change)
}

// A step's start is written while its command runs, and its end only after
// its start: a start write that lands after the command has ended still
// leaves the entry succeeded, with its start and its attempt.
func TestStepStartWrittenWhileItRuns(t *testing.T) {
	ran := make(chan struct{})
	st := &slowStartStore{runStore: &runStore{runs: map[string]store.JobRun{"jr_1": {ID: "jr_1", Status: run.Queued}}}, ran: ran}
	a := &Activities{Store: st, Sandboxes: &ranDriver{ran: ran}, OutputDir: t.TempDir()}
	ctx := context.Background()
	m := manifests.JobManifest{Run: manifests.RunSection{Tasks: []manifests.Task{{Name: "t", Steps: []manifests.Step{{Exec: []string{"true"}}}}}}}
	if err := a.StartRun(ctx, StartRunInput{RunID: "jr_1", Manifest: m}); err != nil {
		t.Fatal(err)
	}
	res, err := a.RunStep(ctx, RunStepInput{RunID: "jr_1", Task: "t", Step: "step-1", Action: m.Run.Tasks[0].Steps[0], Sandbox: "sb"})
	if err != nil || res.Status != run.Succeeded {
		t.Fatalf("step: %+v %v", res, err)
	}
	if st.heldCommand.Load() {
		t.Fatal("the command waited for the step's start to be written")
	}
	if st.updatesFirst.Load() {
		t.Fatal("the step's end was written before its start")
	}
	e := st.runs["jr_1"].StepTimeline[0]
	if e.Status != run.Succeeded || e.StartedAt == nil || e.CompletedAt == nil || len(e.Attempts) != 1 || e.SandboxName == nil {
		t.Fatalf("timeline entry %+v", e)
	}
}

// okDriver is a sandbox driver whose commands succeed at once.
type okDriver struct{ sandbox.Driver }

func (okDriver) Get(_ context.Context, name string) (sandbox.Sandbox, error) {
	return sandbox.Sandbox{Name: name}, nil
}

func (okDriver) Exec(context.Context, sandbox.ExecRequest) (sandbox.ExecResult, error) {
	return sandbox.ExecResult{}, nil
}

// A step followed by another of its task leaves its end (DeferEnd) to the
// next step's start, which writes it; the task's last step writes its own;
// an end no step carried is written by FinishRun. Each entry ends as a
// step that wrote its own end would have left it.
func TestStepEndCarriedByTheNextWrite(t *testing.T) {
	st := &runStore{runs: map[string]store.JobRun{"jr_1": {ID: "jr_1", Status: run.Queued}}}
	a := &Activities{Store: st, Sandboxes: okDriver{}, OutputDir: t.TempDir()}
	ctx := context.Background()
	step := manifests.Step{Exec: []string{"true"}}
	m := manifests.JobManifest{Run: manifests.RunSection{Tasks: []manifests.Task{
		{Name: "t", Steps: []manifests.Step{step, step}},
		{Name: "u", Steps: []manifests.Step{step, step}},
	}}}
	if err := a.StartRun(ctx, StartRunInput{RunID: "jr_1", Manifest: m}); err != nil {
		t.Fatal(err)
	}
	entry := func(task, name string) store.StepTimelineEntry {
		for _, e := range st.runs["jr_1"].StepTimeline {
			if e.TaskName == task && e.Name == name {
				return e
			}
		}
		t.Fatalf("no entry %s/%s in %+v", task, name, st.runs["jr_1"].StepTimeline)
		return store.StepTimelineEntry{}
	}
	stepIn := func(task, name string, next bool, ends ...StepEnd) RunStepInput {
		return RunStepInput{RunID: "jr_1", Task: task, Step: name, Action: step, Sandbox: "sb", NextStep: next, DeferEnd: true, Ends: ends}
	}

	first, err := a.RunStep(ctx, stepIn("t", "step-1", true))
	if err != nil || first.Status != run.Succeeded || first.End == nil {
		t.Fatalf("first step: %+v %v", first, err)
	}
	if e := entry("t", "step-1"); e.Status != run.Running || e.CompletedAt != nil {
		t.Fatalf("the first step's end was written by its own activity: %+v", e)
	}
	last, err := a.RunStep(ctx, stepIn("t", "step-2", false, *first.End))
	if err != nil || last.Status != run.Succeeded || last.End != nil {
		t.Fatalf("the task's last step: %+v %v", last, err)
	}
	for _, name := range []string{"step-1", "step-2"} {
		if e := entry("t", name); e.Status != run.Succeeded || e.CompletedAt == nil || e.StartedAt == nil || e.ExitCode == nil {
			t.Fatalf("%s: %+v", name, e)
		}
	}
	if got := *entry("t", "step-1").CompletedAt; !got.Equal(first.End.CompletedAt) {
		t.Fatalf("the carried end's time %v, the step ended at %v", got, first.End.CompletedAt)
	}

	// A step that fails writes its own end, whatever follows.
	failing := &Activities{Store: st, Sandboxes: exitDriver{code: 3}, OutputDir: t.TempDir()}
	in := stepIn("u", "step-1", true)
	res, err := failing.RunStep(ctx, in)
	if err != nil || res.Status != run.Failed || res.End != nil {
		t.Fatalf("failing step: %+v %v", res, err)
	}
	if e := entry("u", "step-1"); e.Status != run.Failed || e.CompletedAt == nil {
		t.Fatalf("failed step: %+v", e)
	}

	// An end carried to FinishRun (the next step never ran).
	st.runs["jr_1"] = func(r store.JobRun) store.JobRun {
		for i := range r.StepTimeline {
			if e := &r.StepTimeline[i]; e.TaskName == "u" && e.Name == "step-1" {
				e.Status, e.CompletedAt, e.ExitCode = run.Running, nil, nil
			}
		}
		return r
	}(st.runs["jr_1"])
	end := StepEnd{Task: "u", Step: "step-1", CompletedAt: time.Now().UTC().Truncate(time.Millisecond), ExitCode: new(0), Outcome: run.Outcome{Status: run.Succeeded}}
	if _, err := a.FinishRun(ctx, FinishRunInput{RunID: "jr_1", Manifest: m, Outcome: run.Outcome{Status: run.Succeeded}, Ends: []StepEnd{end}}); err != nil {
		t.Fatal(err)
	}
	if e := entry("u", "step-1"); e.Status != run.Succeeded || e.CompletedAt == nil || !e.CompletedAt.Equal(end.CompletedAt) {
		t.Fatalf("an end carried to FinishRun: %+v", e)
	}
	if e := entry("u", "step-2"); e.Status != run.Skipped {
		t.Fatalf("the step that never ran: %+v", e)
	}
}

// The run's last step (FinishNext) leaves its end to FinishRun, which
// writes it with the run's; failing, it writes its own.
func TestLastStepEndCarriedByFinishRun(t *testing.T) {
	st := &runStore{runs: map[string]store.JobRun{"jr_1": {ID: "jr_1", Status: run.Queued}}}
	a := &Activities{Store: st, Sandboxes: okDriver{}, OutputDir: t.TempDir()}
	ctx := context.Background()
	step := manifests.Step{Exec: []string{"true"}}
	m := manifests.JobManifest{Run: manifests.RunSection{Tasks: []manifests.Task{{Name: "t", Steps: []manifests.Step{step}}}}}
	if err := a.StartRun(ctx, StartRunInput{RunID: "jr_1", Manifest: m}); err != nil {
		t.Fatal(err)
	}
	in := RunStepInput{RunID: "jr_1", Task: "t", Step: "step-1", Action: step, Sandbox: "sb", FinishNext: true, DeferEnd: true}
	res, err := a.RunStep(ctx, in)
	if err != nil || res.Status != run.Succeeded || res.End == nil {
		t.Fatalf("last step: %+v %v", res, err)
	}
	if e := st.runs["jr_1"].StepTimeline[0]; e.Status != run.Running || e.CompletedAt != nil {
		t.Fatalf("the last step's end was written by its own activity: %+v", e)
	}
	if _, err := a.FinishRun(ctx, FinishRunInput{RunID: "jr_1", Manifest: m, Outcome: run.Outcome{Status: run.Succeeded}, Ends: []StepEnd{*res.End}}); err != nil {
		t.Fatal(err)
	}
	r := st.runs["jr_1"]
	if e := r.StepTimeline[0]; r.Status != run.Succeeded || e.Status != run.Succeeded || e.CompletedAt == nil || !e.CompletedAt.Equal(res.End.CompletedAt) || e.ExitCode == nil {
		t.Fatalf("after FinishRun: %s %+v", r.Status, e)
	}

	failing := &Activities{Store: st, Sandboxes: exitDriver{code: 3}, OutputDir: t.TempDir()}
	st.runs["jr_1"] = store.JobRun{ID: "jr_1", Status: run.Queued}
	if err := a.StartRun(ctx, StartRunInput{RunID: "jr_1", Manifest: m}); err != nil {
		t.Fatal(err)
	}
	if res, err := failing.RunStep(ctx, in); err != nil || res.Status != run.Failed || res.End != nil {
		t.Fatalf("failing last step: %+v %v", res, err)
	}
	if e := st.runs["jr_1"].StepTimeline[0]; e.Status != run.Failed || e.CompletedAt == nil {
		t.Fatalf("failed last step: %+v", e)
	}
}

// exitDriver's commands exit with code.
type exitDriver struct {
	sandbox.Driver
	code int
}

func (exitDriver) Get(_ context.Context, name string) (sandbox.Sandbox, error) {
	return sandbox.Sandbox{Name: name}, nil
}

func (d exitDriver) Exec(context.Context, sandbox.ExecRequest) (sandbox.ExecResult, error) {
	return sandbox.ExecResult{ExitCode: d.code}, nil
}

// orderStore records the order of step writes.
type orderStore struct {
	*runStore
	mu     sync.Mutex
	writes []string
}

func (s *orderStore) log(kind, step string, id, task string, change func(*store.StepTimelineEntry)) error {
	s.mu.Lock()
	s.writes = append(s.writes, kind+" "+step)
	s.mu.Unlock()
	_, err := s.UpdateJobRun(context.Background(), id, func(r *store.JobRun) error {
		for i := range r.StepTimeline {
			if e := &r.StepTimeline[i]; e.TaskName == task && e.Name == step {
				change(e)
				break
			}
		}
		return nil
	})
	return err
}

func (s *orderStore) MarkJobRunStep(_ context.Context, id, task, step string, change func(*store.StepTimelineEntry)) error {
	return s.log("mark", step, id, task, change)
}

func (s *orderStore) UpdateJobRunStep(_ context.Context, id, task, step string, change func(*store.StepTimelineEntry)) error {
	return s.log("update", step, id, task, change)
}

// The ends a step carries are written before its own start: a reader never
// sees a step running while the one before it still is.
func TestCarriedEndsWrittenBeforeTheStart(t *testing.T) {
	st := &orderStore{runStore: &runStore{runs: map[string]store.JobRun{"jr_1": {ID: "jr_1", Status: run.Queued}}}}
	a := &Activities{Store: st, Sandboxes: okDriver{}, OutputDir: t.TempDir()}
	ctx := context.Background()
	step := manifests.Step{Exec: []string{"true"}}
	m := manifests.JobManifest{Run: manifests.RunSection{Tasks: []manifests.Task{{Name: "t", Steps: []manifests.Step{step, step}}}}}
	if err := a.StartRun(ctx, StartRunInput{RunID: "jr_1", Manifest: m}); err != nil {
		t.Fatal(err)
	}
	first, err := a.RunStep(ctx, RunStepInput{RunID: "jr_1", Task: "t", Step: "step-1", Action: step, Sandbox: "sb", NextStep: true, DeferEnd: true})
	if err != nil || first.End == nil {
		t.Fatalf("first step: %+v %v", first, err)
	}
	if _, err := a.RunStep(ctx, RunStepInput{RunID: "jr_1", Task: "t", Step: "step-2", Action: step, Sandbox: "sb", DeferEnd: true, Ends: []StepEnd{*first.End}}); err != nil {
		t.Fatal(err)
	}
	want := []string{"mark step-1", "update step-1", "mark step-2", "update step-2"}
	if strings.Join(st.writes, ", ") != strings.Join(want, ", ") {
		t.Fatalf("writes %v, want %v", st.writes, want)
	}
}

// With the store, the carried end and the next step's start are one write
// (store.UpdateJobRunSteps), on SQLite and PostgreSQL.
func TestStepEndCarriedWithTheStore(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *store.Store) {
		a := &Activities{Store: st, Sandboxes: okDriver{}, OutputDir: t.TempDir()}
		ctx := context.Background()
		step := manifests.Step{Exec: []string{"true"}}
		m := manifests.JobManifest{Run: manifests.RunSection{Tasks: []manifests.Task{{Name: "t", Steps: []manifests.Step{step, step}}}}}
		r, err := st.CreateJobRun(ctx, store.JobRun{JobName: "j", JobVersionID: "jv_1", Status: run.Queued})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.StartRun(ctx, StartRunInput{RunID: r.ID, Manifest: m}); err != nil {
			t.Fatal(err)
		}
		first, err := a.RunStep(ctx, RunStepInput{RunID: r.ID, Task: "t", Step: "step-1", Action: step, Sandbox: "sb", NextStep: true, DeferEnd: true})
		if err != nil || first.End == nil {
			t.Fatalf("first step: %+v %v", first, err)
		}
		got, err := st.GetJobRun(ctx, r.ID)
		if err != nil || got.StepTimeline[0].Status != run.Running {
			t.Fatalf("after the first step: %+v %v", got.StepTimeline, err)
		}
		if _, err := a.RunStep(ctx, RunStepInput{RunID: r.ID, Task: "t", Step: "step-2", Action: step, Sandbox: "sb", DeferEnd: true, Ends: []StepEnd{*first.End}}); err != nil {
			t.Fatal(err)
		}
		got, err = st.GetJobRun(ctx, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range got.StepTimeline {
			if e.Status != run.Succeeded || e.CompletedAt == nil || e.StartedAt == nil || len(e.Attempts) != 1 || e.ExitCode == nil {
				t.Fatalf("entry %+v", e)
			}
		}
		if !got.StepTimeline[0].CompletedAt.Equal(first.End.CompletedAt) {
			t.Fatalf("first step completed at %v, ended at %v", got.StepTimeline[0].CompletedAt, first.End.CompletedAt)
		}
	})
}
