package workflows

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/linefactory/linefactory/activities"
	"github.com/linefactory/linefactory/manifests/manifesttest"
	"github.com/linefactory/linefactory/manifests/run"
	"github.com/linefactory/linefactory/store"
)

// memPlacements is an in-memory activities.Placements.
type memPlacements struct {
	mu      sync.Mutex
	workers map[string]store.Worker
	placed  map[string]string
}

func (m *memPlacements) GetWorker(_ context.Context, id string) (store.Worker, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	w, ok := m.workers[id]
	if !ok {
		return store.Worker{}, store.ErrNotFound
	}
	return w, nil
}

func (m *memPlacements) PlaceSandbox(_ context.Context, name, workerID string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if h, ok := m.placed[name]; ok {
		return h, nil
	}
	m.placed[name] = workerID
	return workerID, nil
}

func (m *memPlacements) MoveSandbox(_ context.Context, name, from, to string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.placed[name] != from {
		return false, nil
	}
	m.placed[name] = to
	return true, nil
}

func (m *memPlacements) SandboxWorker(_ context.Context, name string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if h, ok := m.placed[name]; ok {
		return h, nil
	}
	return "", store.ErrNotFound
}

func (m *memPlacements) UnplaceSandbox(_ context.Context, name, workerID string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.placed[name] == workerID {
		delete(m.placed, name)
	}
	return nil
}

var affinityJob = manifesttest.Job("affinity")

// TestJobRunSandboxAffinity: the steps of a task go to the queue of the
// worker that acquired its sandbox; an ensure of a sandbox placed on a live
// worker is sent to that worker's queue.
func TestJobRunSandboxAffinity(t *testing.T) {
	f := newFixture(t)
	now := time.Now().UTC()
	pl := &memPlacements{placed: map[string]string{}, workers: map[string]store.Worker{
		"w1": {ID: "w1", Queue: "linefactory/w1", SeenAt: now},
	}}
	f.acts.Placements, f.acts.Worker = pl, activities.Worker{ID: "w1", Queue: "linefactory/w1"}
	var mu sync.Mutex
	queues := map[string][]string{}
	listen := func(env *testsuite.TestWorkflowEnvironment) {
		env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
			mu.Lock()
			defer mu.Unlock()
			queues[info.ActivityType.Name] = append(queues[info.ActivityType.Name], info.TaskQueue)
		})
	}
	m := parseJob(t, affinityJob)
	for i := 0; i < 2; i++ {
		res, _ := f.run(t, m, map[string]any{"n": "1"}, listen)
		if res.Status != run.Succeeded {
			t.Fatalf("run %d: %+v", i, res)
		}
	}
	if got := pl.placed["box-1"]; got != "w1" {
		t.Fatalf("placement of box-1: %q, want w1", got)
	}
	acq, steps := queues["AcquireSandbox"], queues["RunStep"]
	if len(acq) != 2 || len(steps) != 4 {
		t.Fatalf("activities: %v", queues)
	}
	// The first ensure finds no placement: any worker (the workflow's queue).
	if acq[1] != "linefactory/w1" {
		t.Errorf("second ensure went to %q, want the holder's queue linefactory/w1", acq[1])
	}
	for _, q := range steps {
		if q != "linefactory/w1" {
			t.Errorf("step went to %q, want linefactory/w1 (all: %v)", q, steps)
		}
	}
}

// TestJobRunSandboxOnGoneWorker: a named sandbox whose worker stopped
// heartbeating fails the task as infra, naming the worker, without trying
// to acquire it anywhere.
func TestJobRunSandboxOnGoneWorker(t *testing.T) {
	f := newFixture(t)
	seen := time.Now().UTC().Add(-time.Hour)
	pl := &memPlacements{placed: map[string]string{"box-2": "w-old"}, workers: map[string]store.Worker{
		"w-old": {ID: "w-old", Queue: "linefactory/w-old", SeenAt: seen},
	}}
	f.acts.Placements, f.acts.Worker = pl, activities.Worker{ID: "w1", Queue: "linefactory/w1"}
	acquired := false
	res, rec := f.run(t, parseJob(t, affinityJob), map[string]any{"n": "2"}, func(env *testsuite.TestWorkflowEnvironment) {
		env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
			if info.ActivityType.Name == "AcquireSandbox" {
				acquired = true
			}
		})
	})
	if res.Status != run.Failed || res.ErrorCode != activities.CodeWorkerGone || res.FailureClass != run.ClassInfra {
		t.Fatalf("result %+v", res)
	}
	if !strings.Contains(res.ErrorMessage, "w-old") || !strings.Contains(res.ErrorMessage, "box-2") {
		t.Errorf("message does not name the worker and sandbox: %q", res.ErrorMessage)
	}
	if acquired {
		t.Error("the sandbox was acquired although its worker is gone")
	}
	if len(rec.StepTimeline) == 0 || rec.StepTimeline[0].ErrorCode == nil || *rec.StepTimeline[0].ErrorCode != activities.CodeWorkerGone {
		t.Errorf("first step's timeline entry: %+v", rec.StepTimeline)
	}
}

// TestJobRunDefaultTeardownOnItsWorker: with teardown_on_complete unset, the
// sandbox a run provisioned (no lifecycle) is deleted at its end (README,
// Writing manifests) on the worker holding it: FinishRun, on whichever
// worker runs the workflow, cannot see another worker's disk, and with
// workers apart every such sandbox stayed there (19 of 19 in a run of 30
// job runs on two --roles worker processes). Runs before
// localSandboxChange send it a TeardownSandbox activity on its queue; runs
// after it delete it by a local activity when the workflow's worker holds
// it (its quick provision was made there) and send the activity only for
// the sandboxes that worker does not hold.
func TestJobRunDefaultTeardownOnItsWorker(t *testing.T) {
	m := parseJob(t, "[job]\nname = \"x\"\n[[run.tasks]]\nname = \"a\"\n[[run.tasks.steps]]\nexec = [\"true\"]\n")
	for _, c := range []struct {
		name string
		old  bool // a run before localSandboxChange
		// elsewhere: the workflow's worker does not hold the sandbox
		// (TeardownHeld leaves it), so TeardownSandbox goes to its queue.
		elsewhere  bool
		acquire    string // how AcquireSandbox ran: "activity" or "local"
		teardowns  int    // TeardownSandbox activities, on linefactory/w1
		localTears int    // TeardownHeld local activities
	}{
		{name: "old", old: true, acquire: "activity", teardowns: 1},
		{name: "here", acquire: "local", localTears: 1},
		{name: "elsewhere", elsewhere: true, acquire: "local", teardowns: 1, localTears: 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			pl := &memPlacements{placed: map[string]string{}, workers: map[string]store.Worker{
				"w1": {ID: "w1", Queue: "linefactory/w1", SeenAt: time.Now().UTC()},
			}}
			f.acts.Placements, f.acts.Worker = pl, activities.Worker{ID: "w1", Queue: "linefactory/w1"}
			var mu sync.Mutex
			var teardowns, acquired []string
			localTears := 0
			listen := func(env *testsuite.TestWorkflowEnvironment) {
				if c.old {
					env.OnGetVersion(localSandboxChange, workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
				}
				if c.elsewhere {
					env.OnActivity(f.acts.TeardownHeld, mock.Anything, mock.Anything).Return(
						func(_ context.Context, in activities.TeardownHeldInput) (activities.TeardownHeldResult, error) {
							return activities.TeardownHeldResult{Left: in.Sandboxes}, nil
						})
				}
				env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
					mu.Lock()
					defer mu.Unlock()
					switch info.ActivityType.Name {
					case "TeardownSandbox":
						teardowns = append(teardowns, info.TaskQueue)
					case "AcquireSandbox":
						acquired = append(acquired, "activity")
					}
				})
				env.SetOnLocalActivityStartedListener(func(info *activity.Info, _ context.Context, _ []any) {
					mu.Lock()
					defer mu.Unlock()
					switch info.ActivityType.Name {
					case "TeardownHeld":
						localTears++
					case "AcquireSandbox":
						acquired = append(acquired, "local")
					}
				})
			}
			res, rec := f.run(t, m, nil, listen)
			if res.Status != run.Succeeded {
				t.Fatalf("run: %+v", res)
			}
			if len(acquired) != 1 || acquired[0] != c.acquire {
				t.Errorf("AcquireSandbox ran as %v, want once as %s", acquired, c.acquire)
			}
			if len(teardowns) != c.teardowns || (c.teardowns > 0 && teardowns[0] != "linefactory/w1") {
				t.Errorf("TeardownSandbox ran on %v, want %d on the holder's queue linefactory/w1", teardowns, c.teardowns)
			}
			if localTears != c.localTears {
				t.Errorf("TeardownHeld ran %d times, want %d", localTears, c.localTears)
			}
			name := activities.ProvisionName(rec.ID, 0)
			if _, err := f.acts.Sandboxes.Get(context.Background(), name); err == nil {
				t.Fatalf("sandbox %s still there after the run", name)
			}
			if _, ok := pl.placed[name]; ok {
				t.Fatalf("placement of %s kept after the teardown", name)
			}
		})
	}
}
