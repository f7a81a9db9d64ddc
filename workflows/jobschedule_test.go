package workflows

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"go.temporal.io/sdk/workflow"

	"github.com/linefactory/linefactory/activities"
	"github.com/linefactory/linefactory/admit"
	"github.com/linefactory/linefactory/manifests"
	"github.com/linefactory/linefactory/manifests/manifesttest"
	"github.com/linefactory/linefactory/manifests/run"
	"github.com/linefactory/linefactory/store"
)

var scheduledHello = manifesttest.Job("scheduled-hello")

// scheduledDefs is a definitions store whose job "hello" has version
// jv_2 (the latest) carrying m.
func scheduledDefs(t *testing.T, m manifests.JobManifest) *memDefs {
	t.Helper()
	raw, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return &memDefs{jobs: map[string]store.JobVersion{"hello": {ID: "jv_2", Manifest: raw}}}
}

// fireJob runs one job schedule firing for version; the job run workflows
// it starts are recorded.
func fireJob(t *testing.T, fr firing, d *memDefs, version string) (*fixture, []JobRunInput, error) {
	t.Helper()
	if fr.engine == nil {
		fr.engine = &fakeEngine{}
	}
	f := newFixture(t)
	var started []JobRunInput
	stub := func(_ workflow.Context, in JobRunInput) (JobRunResult, error) {
		started = append(started, in)
		return JobRunResult{Outcome: run.Outcome{Status: run.Succeeded}}, nil
	}
	err := fr.run(t, f, d, stub, JobRunWorkflowName, JobScheduleFireWorkflowName, JobScheduleFireInput{JobName: "hello", JobVersionID: version})
	return f, append(started, fr.engine.jobs...), err
}

func (m *memStore) all() []store.JobRun {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []store.JobRun
	for _, r := range m.runs {
		out = append(out, r)
	}
	return out
}

func TestJobScheduleFire(t *testing.T) {
	for kind, fr := range firings {
		t.Run(kind, func(t *testing.T) { testJobScheduleFire(t, fr) })
	}
}

func testJobScheduleFire(t *testing.T, fr firing) {
	t.Run("starts a run of the latest version with the params' defaults", func(t *testing.T) {
		d := scheduledDefs(t, parseJob(t, scheduledHello))
		f, started, err := fireJob(t, fr, d, "jv_2")
		runs := f.store.all()
		if err != nil || len(started) != 1 || len(runs) != 1 {
			t.Fatalf("err %v started %d runs %d", err, len(started), len(runs))
		}
		r, in := runs[0], started[0]
		if in.RunID != r.ID || in.JobVersionID != "jv_2" || in.JobName != "hello" || in.Params["who"] != "world" || in.Manifest.Job.Name != "hello" {
			t.Fatalf("started %+v for run %+v", in, r)
		}
		if r.Status != run.Queued || r.JobName != "hello" || r.JobVersionID != "jv_2" || r.RunParams["who"] != "world" ||
			r.WorkflowID != run.JobRunWorkflowID(r.ID) || r.ErrorMessage != nil {
			t.Fatalf("recorded run %+v", r)
		}
	})
	t.Run("stale version starts nothing", func(t *testing.T) {
		d := scheduledDefs(t, parseJob(t, scheduledHello))
		f, started, err := fireJob(t, fr, d, "jv_1")
		if err != nil || len(started) != 0 || len(f.store.all()) != 0 {
			t.Fatalf("err %v started %d runs %d", err, len(started), len(f.store.all()))
		}
	})
	t.Run("job without versions starts nothing", func(t *testing.T) {
		f, started, err := fireJob(t, fr, &memDefs{jobs: map[string]store.JobVersion{}}, "jv_2")
		if err != nil || len(started) != 0 || len(f.store.all()) != 0 {
			t.Fatalf("err %v started %d runs %d", err, len(started), len(f.store.all()))
		}
	})
	t.Run("disabled schedule starts nothing", func(t *testing.T) {
		m := parseJob(t, scheduledHello)
		off := false
		m.Schedule.Enabled = &off
		f, started, err := fireJob(t, fr, scheduledDefs(t, m), "jv_2")
		if err != nil || len(started) != 0 || len(f.store.all()) != 0 {
			t.Fatalf("err %v started %d runs %d", err, len(started), len(f.store.all()))
		}
	})
	t.Run("defaults that do not validate record a failed run", func(t *testing.T) {
		m := parseJob(t, scheduledHello)
		p := m.Job.Params["who"]
		p.Default = 5 // not a string
		m.Job.Params["who"] = p
		f, started, err := fireJob(t, fr, scheduledDefs(t, m), "jv_2")
		runs := f.store.all()
		if err != nil || len(started) != 0 || len(runs) != 1 {
			t.Fatalf("err %v started %d runs %+v", err, len(started), runs)
		}
		r := runs[0]
		if r.Status != run.Failed || r.CompletedAt == nil || r.ErrorCode == nil || *r.ErrorCode != "SCHEDULE_PARAMS_INVALID" ||
			r.FailureClass == nil || *r.FailureClass != "config" || r.ErrorMessage == nil || r.JobVersionID != "jv_2" || r.ErrorDetails["problems"] == nil {
			t.Fatalf("recorded run %+v", r)
		}
	})
	t.Run("a retried firing makes one run", func(t *testing.T) {
		d := scheduledDefs(t, parseJob(t, scheduledHello))
		f, started, err := fireJob(t, fr, d, "jv_2")
		if err != nil || len(started) != 1 {
			t.Fatalf("err %v started %d", err, len(started))
		}
		// The activity again with the same run id, after a newer version
		// was deployed: the run exists, which answers it; no second run.
		d.jobs["hello"] = store.JobVersion{ID: "jv_3", Manifest: d.jobs["hello"].Manifest}
		d.jobs["hello@jv_2"] = store.JobVersion{ID: "jv_2", Manifest: d.jobs["hello"].Manifest}
		eng := &fakeEngine{}
		acts := &activities.Activities{Store: f.store, Definitions: versionsDefs{d}, Admit: &admit.Admitter{Store: admitStore{jobs: f.store}}, Starts: eng}
		res, err := acts.FireJobSchedule(context.Background(), activities.FireJobScheduleInput{JobName: "hello", JobVersionID: "jv_2", RunID: started[0].RunID, Admit: !fr.legacy})
		if err != nil || res.RunID != started[0].RunID || res.Skipped != "" || res.JobVersionID != "jv_2" || len(f.store.all()) != 1 {
			t.Fatalf("refire: %v %+v runs %d", err, res, len(f.store.all()))
		}
		// An admitting firing starts the still queued run's workflow again,
		// of the version it was recorded with.
		if !fr.legacy && (len(eng.jobs) != 1 || eng.jobs[0].RunID != started[0].RunID || eng.jobs[0].JobVersionID != "jv_2") {
			t.Fatalf("refire started %+v", eng.jobs)
		}
	})
	if fr.legacy {
		return
	}
	t.Run("engine refuses the workflow: the run fails", func(t *testing.T) {
		fr.engine = &fakeEngine{refuse: errors.New("engine says no")}
		f, started, err := fireJob(t, fr, scheduledDefs(t, parseJob(t, scheduledHello)), "jv_2")
		runs := f.store.all()
		if err == nil || len(started) != 0 || len(runs) != 1 {
			t.Fatalf("err %v started %d runs %d", err, len(started), len(runs))
		}
		r := runs[0]
		if r.Status != run.Failed || r.CompletedAt == nil || r.ErrorCode == nil || *r.ErrorCode != run.CodeDispatchFailed ||
			*r.FailureClass != string(run.ClassPlatform) || *r.ErrorMessage != "the run could not be dispatched: engine says no" {
			t.Fatalf("recorded run %+v", r)
		}
	})
}

// versionsDefs finds any version of a job stored under "name@id".
type versionsDefs struct{ *memDefs }

func (d versionsDefs) GetJobVersion(ctx context.Context, name, id string) (store.JobVersion, error) {
	if v, ok := d.jobs[name+"@"+id]; ok {
		return v, nil
	}
	return d.memDefs.GetJobVersion(ctx, name, id)
}
