package workflows

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/linefactory/linefactory/activities"
	"github.com/linefactory/linefactory/admit"
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
		raw, _ := json.Marshal(lineJob(t, name))
		d.jobs[name] = store.JobVersion{ID: "jv_" + name, Manifest: raw}
	}
	m := lineInput(t, oneStage("hello"), nil).Manifest
	raw, _ := json.Marshal(m)
	d.line = store.LineVersion{ID: "lv_1", Manifest: raw}
	d.schedule = &store.LineSchedule{LineName: "l", Cron: "* * * * *", Timezone: "UTC", Enabled: true, ScheduleGeneration: 2, Inputs: map[string]any{}}
	return d
}

func (d *memDefs) GetLineRun(_ context.Context, id string) (store.LineRun, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.created {
		if c.ID == id {
			return c, nil
		}
	}
	return store.LineRun{}, store.ErrNotFound
}

func (d *memDefs) UpdateLineRun(_ context.Context, id string, change func(*store.LineRun) error) (store.LineRun, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := range d.created {
		if d.created[i].ID == id {
			c := d.created[i]
			if err := change(&c); err != nil {
				return store.LineRun{}, err
			}
			d.created[i] = c
			return c, nil
		}
	}
	return store.LineRun{}, store.ErrNotFound
}

// admitStore is what firings admit runs into: job runs in the fixture's
// store, line runs in the definitions.
type admitStore struct {
	jobs  *memStore
	lines *memDefs
}

func (s admitStore) CreateJobRun(ctx context.Context, r store.JobRun) (store.JobRun, error) {
	return s.jobs.CreateJobRun(ctx, r)
}

func (s admitStore) GetJobRun(ctx context.Context, id string) (store.JobRun, error) {
	return s.jobs.GetJobRun(ctx, id)
}

func (s admitStore) UpdateJobRun(ctx context.Context, id string, change func(*store.JobRun) error) (store.JobRun, error) {
	return s.jobs.UpdateJobRun(ctx, id, change)
}

func (s admitStore) CreateLineRun(ctx context.Context, r store.LineRun) (store.LineRun, error) {
	return s.lines.CreateLineRun(ctx, r)
}

func (s admitStore) GetLineRun(ctx context.Context, id string) (store.LineRun, error) {
	return s.lines.GetLineRun(ctx, id)
}

func (s admitStore) UpdateLineRun(ctx context.Context, id string, change func(*store.LineRun) error) (store.LineRun, error) {
	return s.lines.UpdateLineRun(ctx, id, change)
}

// fakeEngine records the runs firings start, as the workflows' inputs; it
// refuses them all while refuse is set.
type fakeEngine struct {
	mu     sync.Mutex
	jobs   []JobRunInput
	lines  []LineRunInput
	refuse error
}

func (e *fakeEngine) StartFiredJobRun(_ context.Context, r activities.FiredJobRun) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.refuse != nil {
		return e.refuse
	}
	e.jobs = append(e.jobs, FiredJobRunInput(r))
	return nil
}

func (e *fakeEngine) StartFiredLineRun(_ context.Context, r activities.FiredLineRun) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.refuse != nil {
		return e.refuse
	}
	e.lines = append(e.lines, FiredLineRunInput(r))
	return nil
}

// firing is how a firing workflow is run: by the current code (the firing's
// activity admits the run through a fake engine), or as a firing begun
// before admitInActivity (the workflow starts a stub child).
type firing struct {
	legacy bool
	engine *fakeEngine
}

var firings = map[string]firing{"admitting": {}, "before admit-in-activity": {legacy: true}}

// run executes the firing workflow name with input on f's activities; stub
// is the child workflow a legacy firing starts.
func (fr firing) run(t *testing.T, f *fixture, d *memDefs, stub any, stubName, name string, input any) error {
	t.Helper()
	f.acts.Definitions = d
	f.acts.Admit = &admit.Admitter{Store: admitStore{jobs: f.store, lines: d}}
	f.acts.Starts = fr.engine
	env := f.suite.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(ScheduleFireWorkflow, workflow.RegisterOptions{Name: ScheduleFireWorkflowName})
	env.RegisterWorkflowWithOptions(JobScheduleFireWorkflow, workflow.RegisterOptions{Name: JobScheduleFireWorkflowName})
	env.RegisterWorkflowWithOptions(stub, workflow.RegisterOptions{Name: stubName})
	env.RegisterActivity(f.acts)
	if fr.legacy {
		env.OnGetVersion(admitInActivity, workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
	}
	env.SetTestTimeout(30 * time.Second)
	env.ExecuteWorkflow(name, input)
	return env.GetWorkflowError()
}

// fire runs one schedule firing; the managers it starts are recorded.
func fire(t *testing.T, fr firing, d *memDefs, gen int64) ([]LineRunInput, error) {
	t.Helper()
	if fr.engine == nil {
		fr.engine = &fakeEngine{}
	}
	var started []LineRunInput
	stub := func(_ workflow.Context, in LineRunInput) (LineRunResult, error) {
		started = append(started, in)
		return LineRunResult{Status: run.Succeeded}, nil
	}
	err := fr.run(t, newFixture(t), d, stub, LineRunWorkflowName, ScheduleFireWorkflowName, ScheduleFireInput{LineName: "l", Generation: gen})
	return append(started, fr.engine.lines...), err
}

func TestScheduleFire(t *testing.T) {
	for kind, fr := range firings {
		t.Run(kind, func(t *testing.T) { testScheduleFire(t, fr) })
	}
}

func testScheduleFire(t *testing.T, fr firing) {
	t.Run("starts a run with defaulted inputs", func(t *testing.T) {
		d := newDefs(t, "hello")
		started, err := fire(t, fr, d, 2)
		if err != nil || len(started) != 1 || len(d.created) != 1 {
			t.Fatalf("err %v started %d created %d", err, len(started), len(d.created))
		}
		if started[0].RunID != d.created[0].ID || d.created[0].RunParams["who"] != "world" || d.created[0].Status != run.Queued {
			t.Fatalf("started %+v created %+v", started[0], d.created[0])
		}
	})
	t.Run("stale generation starts nothing", func(t *testing.T) {
		d := newDefs(t, "hello")
		started, err := fire(t, fr, d, 1)
		if err != nil || len(started) != 0 || len(d.created) != 0 {
			t.Fatalf("err %v started %d created %d", err, len(started), len(d.created))
		}
	})
	t.Run("disabled schedule starts nothing", func(t *testing.T) {
		d := newDefs(t, "hello")
		d.schedule.Enabled = false
		started, err := fire(t, fr, d, 2)
		if err != nil || len(started) != 0 || len(d.created) != 0 {
			t.Fatalf("err %v started %d created %d", err, len(started), len(d.created))
		}
	})
	t.Run("invalid inputs record a failed run", func(t *testing.T) {
		d := newDefs(t, "hello")
		d.schedule.Inputs = map[string]any{"who": 5}
		started, err := fire(t, fr, d, 2)
		if err != nil || len(started) != 0 || len(d.created) != 1 || d.created[0].Status != run.Failed ||
			*d.created[0].Failure.Code != "stage_params_invalid" || d.created[0].Failure.Domain != "config" {
			t.Fatalf("err %v started %d created %+v", err, len(started), d.created)
		}
	})
	t.Run("inputs over the params limit record a failed run", func(t *testing.T) {
		d := newDefs(t, "hello")
		d.schedule.Inputs = map[string]any{"who": strings.Repeat("x", 300<<10)}
		started, err := fire(t, fr, d, 2)
		if err != nil || len(started) != 0 || len(d.created) != 1 || d.created[0].Status != run.Failed ||
			*d.created[0].Failure.Code != "stage_params_invalid" || !strings.Contains(*d.created[0].ErrorMessage, "too large") {
			t.Fatalf("err %v started %d created %+v", err, len(started), d.created)
		}
	})
	t.Run("unresolvable stage job records a failed run", func(t *testing.T) {
		d := newDefs(t)
		started, err := fire(t, fr, d, 2)
		if err != nil || len(started) != 0 || len(d.created) != 1 || *d.created[0].Failure.Code != "dispatch_failed" || d.created[0].Failure.Domain != "platform" {
			t.Fatalf("err %v started %d created %+v", err, len(started), d.created)
		}
	})
	t.Run("a retried firing makes one run", func(t *testing.T) {
		d := newDefs(t, "hello")
		started, err := fire(t, fr, d, 2)
		if err != nil || len(started) != 1 {
			t.Fatalf("err %v started %d", err, len(started))
		}
		// FireSchedule again with the same run id: the run exists, which
		// is success, and no second run is made.
		eng := &fakeEngine{}
		a := &activities.Activities{Definitions: d, Admit: &admit.Admitter{Store: admitStore{lines: d}}, Starts: eng}
		res, err := a.FireSchedule(context.Background(), activities.FireScheduleInput{LineName: "l", Generation: 2, RunID: started[0].RunID, Admit: !fr.legacy})
		if err != nil || res.RunID != started[0].RunID || len(d.created) != 1 {
			t.Fatalf("refire: %v %+v created %d", err, res, len(d.created))
		}
		// An admitting firing starts the still queued run's manager again
		// (the engine knows it by its workflow id).
		if !fr.legacy && (len(eng.lines) != 1 || eng.lines[0].RunID != started[0].RunID) {
			t.Fatalf("refire started %+v", eng.lines)
		}
	})
	if fr.legacy {
		return
	}
	t.Run("engine refuses the manager: the run fails dispatch_failed", func(t *testing.T) {
		d := newDefs(t, "hello")
		fr.engine = &fakeEngine{refuse: errors.New("engine says no")}
		started, err := fire(t, fr, d, 2)
		if err == nil || len(started) != 0 || len(d.created) != 1 {
			t.Fatalf("err %v started %d created %d", err, len(started), len(d.created))
		}
		r := d.created[0]
		if r.Status != run.Failed || r.CompletedAt == nil || r.Failure == nil || *r.Failure.Code != run.DispatchFailed ||
			r.Failure.Domain != run.DomainPlatform || *r.ErrorMessage != "the line run could not be dispatched: engine says no" {
			t.Fatalf("recorded run %+v failure %+v", r, r.Failure)
		}
	})
}
