package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/linefactory/linefactory/admit"
	"github.com/linefactory/linefactory/manifests"
	"github.com/linefactory/linefactory/manifests/run"
	"github.com/linefactory/linefactory/store"
)

// RunStarts starts the workflows of the runs schedule firings admit. cmd
// implements it with the engine's client: the workflows' inputs are types
// of package workflows, which activities cannot import. A workflow of the
// run's id that is already started is no error.
type RunStarts interface {
	StartFiredJobRun(ctx context.Context, r FiredJobRun) error
	StartFiredLineRun(ctx context.Context, r FiredLineRun) error
}

// FireJobScheduleInput is one firing of a job's [schedule]. JobVersionID is
// the version whose deploy made the Temporal Schedule: the fence against
// stale firings. RunID is the id of the job run it makes, chosen by the
// firing workflow so a retried activity makes the same run. Admit: as
// FireScheduleInput's.
type FireJobScheduleInput struct {
	JobName      string
	JobVersionID string
	FiredAt      time.Time
	RunID        string
	Admit        bool
}

// FireJobScheduleResult is the job run a firing created, or why it was
// skipped. Failed says the run was recorded failed (its params' defaults do
// not validate, or it cannot run on this server) and is not to be started.
// Manifest and Params are the workflow's input, given only to a firing that
// starts the workflow itself (not Admit).
type FireJobScheduleResult struct {
	Skipped      string
	Failed       string
	RunID        string
	JobVersionID string
	Manifest     manifests.JobManifest
	Params       map[string]any
}

// FiredJobRun is the workflow input of a job run a schedule fired.
type FiredJobRun struct {
	RunID        string
	JobName      string
	JobVersionID string
	Manifest     manifests.JobManifest
	Params       map[string]any
}

// FireJobSchedule makes the job run of a job schedule firing, recorded like
// a run started through the API: the job's latest version, its params'
// defaults, status queued. It is idempotent on in.RunID. A firing whose
// version is no longer the job's latest (a newer version was deployed since,
// which re-made or dropped the schedule), or whose schedule is disabled,
// starts nothing. A firing whose defaults do not validate is recorded as a
// failed job run. With in.Admit the run is admitted (package admit): a
// workflow the engine refuses leaves the run failed and the activity fails
// (not retried).
func (a *Activities) FireJobSchedule(ctx context.Context, in FireJobScheduleInput) (FireJobScheduleResult, error) {
	if a.Definitions == nil || a.Store == nil {
		return FireJobScheduleResult{}, permanent("SCHEDULES_UNAVAILABLE", errors.New("this worker has no definitions store"))
	}
	if in.RunID == "" {
		return FireJobScheduleResult{}, permanent("SCHEDULE_INVALID", errors.New("a job schedule firing needs a run id"))
	}
	// A retry after the run was recorded answers from the record, whatever
	// was deployed meanwhile.
	if r, err := a.Store.GetJobRun(ctx, in.RunID); err == nil {
		return a.firedAlready(ctx, r, in.Admit)
	} else if !errors.Is(err, store.ErrNotFound) {
		return FireJobScheduleResult{}, err
	}
	v, m, skipped, err := a.scheduledVersion(ctx, in)
	if err != nil || skipped != "" {
		return FireJobScheduleResult{Skipped: skipped}, err
	}
	rec := store.JobRun{ID: in.RunID, JobName: in.JobName, JobVersionID: v.ID, Status: run.Queued,
		RunParams: map[string]any{}, Region: m.Run.RegionOrNil(), WorkflowID: run.JobRunWorkflowID(in.RunID)}
	params, failure := scheduledParams(m)
	if failure != nil {
		now := a.now()
		rec.CompletedAt = &now
		rec.SetOutcome(*failure)
		if _, err := a.Store.CreateJobRun(ctx, rec); err != nil && !errors.Is(err, store.ErrConflict) {
			return FireJobScheduleResult{}, err
		}
		return FireJobScheduleResult{Failed: failure.ErrorMessage, RunID: rec.ID, JobVersionID: v.ID}, nil
	}
	rec.RunParams = params
	fired := FiredJobRun{RunID: rec.ID, JobName: in.JobName, JobVersionID: v.ID, Manifest: m, Params: params}
	if in.Admit {
		return a.admitFiredJobRun(ctx, rec, fired)
	}
	if _, err := a.Store.CreateJobRun(ctx, rec); err != nil && !errors.Is(err, store.ErrConflict) {
		return FireJobScheduleResult{}, err
	}
	return FireJobScheduleResult{RunID: rec.ID, JobVersionID: v.ID, Manifest: m, Params: params}, nil
}

// scheduledVersion is the job version a firing runs, or why it starts
// nothing.
func (a *Activities) scheduledVersion(ctx context.Context, in FireJobScheduleInput) (store.JobVersion, manifests.JobManifest, string, error) {
	var m manifests.JobManifest
	v, err := a.Definitions.LatestJobVersion(ctx, in.JobName)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return v, m, "the job has no versions", nil
	case err != nil:
		return v, m, "", err
	case v.ID != in.JobVersionID:
		return v, m, fmt.Sprintf("stale firing of version %s (latest %s)", in.JobVersionID, v.ID), nil
	}
	if err := json.Unmarshal(v.Manifest, &m); err != nil {
		return v, m, "", permanent("JOB_INVALID", err)
	}
	switch {
	case m.Schedule == nil:
		return v, m, "the job version has no schedule", nil
	case m.Schedule.Enabled != nil && !*m.Schedule.Enabled:
		return v, m, "the schedule is disabled", nil
	}
	return v, m, "", nil
}

// scheduledParams are the params of a scheduled run: the defaults, checked
// against their specs like params given to a manual start; or the outcome
// of a run whose defaults do not validate.
func scheduledParams(m manifests.JobManifest) (map[string]any, *run.Outcome) {
	defaults := map[string]any{}
	for name, p := range m.Job.Params {
		if p.Default != nil {
			defaults[name] = p.Default
		}
	}
	params, ps := manifests.ApplyParams(m.Job.Params, defaults)
	if ps == nil {
		return params, nil
	}
	problems := make([]any, len(ps))
	for i, p := range ps {
		problems[i] = map[string]any{"path": p.Path, "message": p.Message}
	}
	return nil, &run.Outcome{Status: run.Failed, ErrorCode: "SCHEDULE_PARAMS_INVALID", FailureClass: run.ClassConfig,
		ErrorMessage: "the scheduled run was not started: the defaults of the job's params do not validate: " + ps.Error(),
		ErrorDetails: map[string]any{"problems": problems}}
}

// firedAlready answers a repeated firing from the run the first made; an
// admitting firing admits it again (its workflow is started again while the
// run is still queued).
func (a *Activities) firedAlready(ctx context.Context, r store.JobRun, admitting bool) (FireJobScheduleResult, error) {
	if r.Status == run.Failed && r.StartedAt == nil {
		msg := "the scheduled run failed"
		if r.ErrorMessage != nil {
			msg = *r.ErrorMessage
		}
		return FireJobScheduleResult{Failed: msg, RunID: r.ID, JobVersionID: r.JobVersionID}, nil
	}
	v, err := a.Definitions.GetJobVersion(ctx, r.JobName, r.JobVersionID)
	if err != nil {
		return FireJobScheduleResult{}, err
	}
	var m manifests.JobManifest
	if err := json.Unmarshal(v.Manifest, &m); err != nil {
		return FireJobScheduleResult{}, permanent("JOB_INVALID", err)
	}
	if admitting {
		return a.admitFiredJobRun(ctx, r, FiredJobRun{RunID: r.ID, JobName: r.JobName, JobVersionID: v.ID, Manifest: m, Params: r.RunParams})
	}
	return FireJobScheduleResult{RunID: r.ID, JobVersionID: v.ID, Manifest: m, Params: r.RunParams}, nil
}

// admitFiredJobRun admits the run of a firing and starts its workflow.
func (a *Activities) admitFiredJobRun(ctx context.Context, rec store.JobRun, fired FiredJobRun) (FireJobScheduleResult, error) {
	if a.Admit == nil || a.Starts == nil {
		return FireJobScheduleResult{}, permanent("SCHEDULES_UNAVAILABLE", errors.New("this worker cannot start runs"))
	}
	got, err := a.Admit.JobRun(ctx, rec, func(ctx context.Context) error { return a.Starts.StartFiredJobRun(ctx, fired) })
	if err != nil {
		return FireJobScheduleResult{}, admissionError(err)
	}
	return FireJobScheduleResult{RunID: got.ID, JobVersionID: fired.JobVersionID}, nil
}

// admissionError is the activity error of an admission that failed: a run
// the engine refused is recorded failed and not retried; anything else (the
// store) is retried.
func admissionError(err error) error {
	if errors.Is(err, admit.ErrNotDispatched) {
		return permanent(run.CodeDispatchFailed, err)
	}
	return err
}

// FailScheduledJobRunInput marks a scheduled job run that could not be
// dispatched as failed.
type FailScheduledJobRunInput struct {
	RunID   string
	Message string
}

// FailScheduledJobRun records that a scheduled job run's workflow could not
// be started (admit.Admitter.JobRunNotDispatched); a run that is already
// final is left alone. Only firings begun before they admitted their runs
// themselves (FireJobScheduleInput.Admit) call it.
func (a *Activities) FailScheduledJobRun(ctx context.Context, in FailScheduledJobRunInput) error {
	if a.Admit == nil {
		return permanent("SCHEDULES_UNAVAILABLE", errors.New("this worker cannot record runs"))
	}
	cause := errors.New(strings.TrimPrefix(in.Message, "the run could not be dispatched: ")) // the workflow sends the whole message
	_, err := a.Admit.JobRunNotDispatched(ctx, in.RunID, cause)
	return err
}
