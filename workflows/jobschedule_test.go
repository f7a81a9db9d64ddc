package workflows

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/linefactory/linefactory/activities"
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

// fireJob runs one job schedule firing for version; the job run workflow
// it starts is a stub that records its input.
func fireJob(t *testing.T, d *memDefs, version string) (*fixture, []JobRunInput, error) {
	t.Helper()
	f := newFixture(t)
	f.acts.Definitions = d
	env := f.suite.NewTestWorkflowEnvironment()
	var started []JobRunInput
	env.RegisterWorkflowWithOptions(JobScheduleFireWorkflow, workflow.RegisterOptions{Name: JobScheduleFireWorkflowName})
	env.RegisterWorkflowWithOptions(func(_ workflow.Context, in JobRunInput) (JobRunResult, error) {
		started = append(started, in)
		return JobRunResult{Outcome: run.Outcome{Status: run.Succeeded}}, nil
	}, workflow.RegisterOptions{Name: JobRunWorkflowName})
	env.RegisterActivity(f.acts)
	env.SetTestTimeout(30 * time.Second)
	env.ExecuteWorkflow(JobScheduleFireWorkflowName, JobScheduleFireInput{JobName: "hello", JobVersionID: version})
	return f, started, env.GetWorkflowError()
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
	t.Run("starts a run of the latest version with the params' defaults", func(t *testing.T) {
		d := scheduledDefs(t, parseJob(t, scheduledHello))
		f, started, err := fireJob(t, d, "jv_2")
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
		f, started, err := fireJob(t, d, "jv_1")
		if err != nil || len(started) != 0 || len(f.store.all()) != 0 {
			t.Fatalf("err %v started %d runs %d", err, len(started), len(f.store.all()))
		}
	})
	t.Run("job without versions starts nothing", func(t *testing.T) {
		f, started, err := fireJob(t, &memDefs{jobs: map[string]store.JobVersion{}}, "jv_2")
		if err != nil || len(started) != 0 || len(f.store.all()) != 0 {
			t.Fatalf("err %v started %d runs %d", err, len(started), len(f.store.all()))
		}
	})
	t.Run("disabled schedule starts nothing", func(t *testing.T) {
		m := parseJob(t, scheduledHello)
		off := false
		m.Schedule.Enabled = &off
		f, started, err := fireJob(t, scheduledDefs(t, m), "jv_2")
		if err != nil || len(started) != 0 || len(f.store.all()) != 0 {
			t.Fatalf("err %v started %d runs %d", err, len(started), len(f.store.all()))
		}
	})
	t.Run("defaults that do not validate record a failed run", func(t *testing.T) {
		m := parseJob(t, scheduledHello)
		p := m.Job.Params["who"]
		p.Default = 5 // not a string
		m.Job.Params["who"] = p
		f, started, err := fireJob(t, scheduledDefs(t, m), "jv_2")
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
		f, started, err := fireJob(t, d, "jv_2")
		if err != nil || len(started) != 1 {
			t.Fatalf("err %v started %d", err, len(started))
		}
		// The activity again with the same run id, after a newer version
		// was deployed: the run exists, which answers it; no second run.
		d.jobs["hello"] = store.JobVersion{ID: "jv_3", Manifest: d.jobs["hello"].Manifest}
		d.jobs["hello@jv_2"] = store.JobVersion{ID: "jv_2", Manifest: d.jobs["hello"].Manifest}
		acts := &activities.Activities{Store: f.store, Definitions: versionsDefs{d}}
		res, err := acts.FireJobSchedule(context.Background(), activities.FireJobScheduleInput{JobName: "hello", JobVersionID: "jv_2", RunID: started[0].RunID})
		if err != nil || res.RunID != started[0].RunID || res.Skipped != "" || res.JobVersionID != "jv_2" || len(f.store.all()) != 1 {
			t.Fatalf("refire: %v %+v runs %d", err, res, len(f.store.all()))
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
