package activities

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/linefactory/linefactory/activities/sandbox"
	"github.com/linefactory/linefactory/manifests"
	"github.com/linefactory/linefactory/manifests/run"
	"github.com/linefactory/linefactory/store"
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
