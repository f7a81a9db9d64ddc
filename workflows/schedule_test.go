package workflows

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/linefactory/linefactory/activities"
	"github.com/linefactory/linefactory/manifests/run"
	"github.com/linefactory/linefactory/store"
)

// memDefs is an in-memory definitions store for schedule firings.
type memDefs struct {
	mu       sync.Mutex
	jobs     map[string]store.JobVersion // by job name (the latest)
	line     store.LineVersion
	schedule *store.LineSchedule
	created  []store.LineRun
}

func (d *memDefs) GetJobVersion(_ context.Context, name, id string) (store.JobVersion, error) {
	if v, ok := d.jobs[name]; ok && v.ID == id {
		return v, nil
	}
	return store.JobVersion{}, store.ErrNotFound
}

func (d *memDefs) LatestJobVersion(_ context.Context, name string) (store.JobVersion, error) {
	if v, ok := d.jobs[name]; ok {
		return v, nil
	}
	return store.JobVersion{}, store.ErrNotFound
}

func (d *memDefs) GetLineSchedule(context.Context, string) (store.LineSchedule, error) {
	if d.schedule == nil {
		return store.LineSchedule{}, store.ErrNotFound
	}
	return *d.schedule, nil
}

func (d *memDefs) LatestLineVersion(context.Context, string) (store.LineVersion, error) {
	return d.line, nil
}

func (d *memDefs) CreateLineRun(_ context.Context, r store.LineRun) (store.LineRun, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.created {
		if c.ID == r.ID {
			return store.LineRun{}, store.ErrConflict
		}
	}
	d.created = append(d.created, r)
	return r, nil
}

func newDefs(t *testing.T, jobs ...string) *memDefs {
	t.Helper()
	d := &memDefs{jobs: map[string]store.JobVersion{}}
	for _, name := range jobs {
		raw, _ := json.Marshal(parseJob(t, lineJobs[name]))
		d.jobs[name] = store.JobVersion{ID: "jv_" + name, Manifest: raw}
	}
	m := lineInput(t, oneStage("hello"), nil).Manifest
	raw, _ := json.Marshal(m)
	d.line = store.LineVersion{ID: "lv_1", Manifest: raw}
	d.schedule = &store.LineSchedule{LineName: "l", Cron: "* * * * *", Timezone: "UTC", Enabled: true, ScheduleGeneration: 2, Inputs: map[string]any{}}
	return d
}

// fire runs one schedule firing; the manager it starts is a stub that
// records its input.
func fire(t *testing.T, d *memDefs, gen int64) ([]LineRunInput, error) {
	t.Helper()
	f := newFixture(t)
	f.acts.Definitions = d
	env := f.suite.NewTestWorkflowEnvironment()
	var started []LineRunInput
	env.RegisterWorkflowWithOptions(ScheduleFireWorkflow, workflow.RegisterOptions{Name: ScheduleFireWorkflowName})
	env.RegisterWorkflowWithOptions(func(_ workflow.Context, in LineRunInput) (LineRunResult, error) {
		started = append(started, in)
		return LineRunResult{Status: run.Succeeded}, nil
	}, workflow.RegisterOptions{Name: LineRunWorkflowName})
	env.RegisterActivity(f.acts)
	env.SetTestTimeout(30 * time.Second)
	env.ExecuteWorkflow(ScheduleFireWorkflowName, ScheduleFireInput{LineName: "l", Generation: gen})
	return started, env.GetWorkflowError()
}

func TestScheduleFire(t *testing.T) {
	t.Run("starts a run with defaulted inputs", func(t *testing.T) {
		d := newDefs(t, "hello")
		started, err := fire(t, d, 2)
		if err != nil || len(started) != 1 || len(d.created) != 1 {
			t.Fatalf("err %v started %d created %d", err, len(started), len(d.created))
		}
		if started[0].RunID != d.created[0].ID || d.created[0].RunParams["who"] != "world" || d.created[0].Status != run.Queued {
			t.Fatalf("started %+v created %+v", started[0], d.created[0])
		}
	})
	t.Run("stale generation starts nothing", func(t *testing.T) {
		d := newDefs(t, "hello")
		started, err := fire(t, d, 1)
		if err != nil || len(started) != 0 || len(d.created) != 0 {
			t.Fatalf("err %v started %d created %d", err, len(started), len(d.created))
		}
	})
	t.Run("disabled schedule starts nothing", func(t *testing.T) {
		d := newDefs(t, "hello")
		d.schedule.Enabled = false
		started, err := fire(t, d, 2)
		if err != nil || len(started) != 0 || len(d.created) != 0 {
			t.Fatalf("err %v started %d created %d", err, len(started), len(d.created))
		}
	})
	t.Run("invalid inputs record a failed run", func(t *testing.T) {
		d := newDefs(t, "hello")
		d.schedule.Inputs = map[string]any{"who": 5}
		started, err := fire(t, d, 2)
		if err != nil || len(started) != 0 || len(d.created) != 1 || d.created[0].Status != run.Failed ||
			*d.created[0].Failure.Code != "stage_params_invalid" || d.created[0].Failure.Domain != "config" {
			t.Fatalf("err %v started %d created %+v", err, len(started), d.created)
		}
	})
	t.Run("inputs over the params limit record a failed run", func(t *testing.T) {
		d := newDefs(t, "hello")
		d.schedule.Inputs = map[string]any{"who": strings.Repeat("x", 300<<10)}
		started, err := fire(t, d, 2)
		if err != nil || len(started) != 0 || len(d.created) != 1 || d.created[0].Status != run.Failed ||
			*d.created[0].Failure.Code != "stage_params_invalid" || !strings.Contains(*d.created[0].ErrorMessage, "too large") {
			t.Fatalf("err %v started %d created %+v", err, len(started), d.created)
		}
	})
	t.Run("unresolvable stage job records a failed run", func(t *testing.T) {
		d := newDefs(t)
		started, err := fire(t, d, 2)
		if err != nil || len(started) != 0 || len(d.created) != 1 || *d.created[0].Failure.Code != "dispatch_failed" || d.created[0].Failure.Domain != "platform" {
			t.Fatalf("err %v started %d created %+v", err, len(started), d.created)
		}
	})
	t.Run("a retried firing makes one run", func(t *testing.T) {
		d := newDefs(t, "hello")
		started, err := fire(t, d, 2)
		if err != nil || len(started) != 1 {
			t.Fatalf("err %v started %d", err, len(started))
		}
		// FireSchedule again with the same run id: the run exists, which
		// is success, and no second run is made.
		a := &activities.Activities{Definitions: d}
		res, err := a.FireSchedule(context.Background(), activities.FireScheduleInput{LineName: "l", Generation: 2, RunID: started[0].RunID})
		if err != nil || res.RunID != started[0].RunID || len(d.created) != 1 {
			t.Fatalf("refire: %v %+v created %d", err, res, len(d.created))
		}
	})
}
