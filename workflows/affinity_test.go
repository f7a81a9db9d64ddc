package workflows

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"

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
// job runs on two --roles worker processes).
func TestJobRunDefaultTeardownOnItsWorker(t *testing.T) {
	f := newFixture(t)
	pl := &memPlacements{placed: map[string]string{}, workers: map[string]store.Worker{
		"w1": {ID: "w1", Queue: "linefactory/w1", SeenAt: time.Now().UTC()},
	}}
	f.acts.Placements, f.acts.Worker = pl, activities.Worker{ID: "w1", Queue: "linefactory/w1"}
	var mu sync.Mutex
	var teardowns []string
	listen := func(env *testsuite.TestWorkflowEnvironment) {
		env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
			mu.Lock()
			defer mu.Unlock()
			if info.ActivityType.Name == "TeardownSandbox" {
				teardowns = append(teardowns, info.TaskQueue)
			}
		})
	}
	m := parseJob(t, "[job]\nname = \"x\"\n[[run.tasks]]\nname = \"a\"\n[[run.tasks.steps]]\nexec = [\"true\"]\n")
	res, rec := f.run(t, m, nil, listen)
	if res.Status != run.Succeeded {
		t.Fatalf("run: %+v", res)
	}
	if len(teardowns) != 1 || teardowns[0] != "linefactory/w1" {
		t.Fatalf("TeardownSandbox ran on %v, want once on the holder's queue linefactory/w1", teardowns)
	}
	name := activities.ProvisionName(rec.ID, 0)
	if _, err := f.acts.Sandboxes.Get(context.Background(), name); err == nil {
		t.Fatalf("sandbox %s still there after the run", name)
	}
	if _, ok := pl.placed[name]; ok {
		t.Fatalf("placement of %s kept after the teardown", name)
	}
}
