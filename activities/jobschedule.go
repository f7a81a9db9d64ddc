package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/linefactory/linefactory/manifests"
	"github.com/linefactory/linefactory/manifests/run"
	"github.com/linefactory/linefactory/store"
)

// FireJobScheduleInput is one firing of a job's [schedule]. JobVersionID is
// the version whose deploy made the Temporal Schedule: the fence against
// stale firings. RunID is the id of the job run it makes, chosen by the
// firing workflow so a retried activity makes the same run.
type FireJobScheduleInput struct {
	JobName      string
	JobVersionID string
	FiredAt      time.Time
	RunID        string
}

// FireJobScheduleResult is the job run a firing created, or why it was
// skipped. Failed says the run was recorded failed (its params' defaults do
// not validate, or it cannot run on this server) and is not to be started.
type FireJobScheduleResult struct {
	Skipped      string
	Failed       string
	RunID        string
	JobVersionID string
	Manifest     manifests.JobManifest
	Params       map[string]any
}

// FireJobSchedule creates the job run of a job schedule firing, recorded
// like a run started through the API: the job's latest version, its params'
// defaults, status queued. It is idempotent on in.RunID. A firing whose
// version is no longer the job's latest (a newer version was deployed since,
// which re-made or dropped the schedule), or whose schedule is disabled,
// starts nothing. A firing whose defaults do not validate is recorded as a
// failed job run.
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
		return a.firedAlready(ctx, r)
	} else if !errors.Is(err, store.ErrNotFound) {
		return FireJobScheduleResult{}, err
	}
	v, err := a.Definitions.LatestJobVersion(ctx, in.JobName)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return FireJobScheduleResult{Skipped: "the job has no versions"}, nil
	case err != nil:
		return FireJobScheduleResult{}, err
	case v.ID != in.JobVersionID:
		return FireJobScheduleResult{Skipped: fmt.Sprintf("stale firing of version %s (latest %s)", in.JobVersionID, v.ID)}, nil
	}
	var m manifests.JobManifest
	if err := json.Unmarshal(v.Manifest, &m); err != nil {
		return FireJobScheduleResult{}, permanent("JOB_INVALID", err)
	}
	switch {
	case m.Schedule == nil:
		return FireJobScheduleResult{Skipped: "the job version has no schedule"}, nil
	case m.Schedule.Enabled != nil && !*m.Schedule.Enabled:
		return FireJobScheduleResult{Skipped: "the schedule is disabled"}, nil
	}
	rec := store.JobRun{ID: in.RunID, JobName: in.JobName, JobVersionID: v.ID, Status: run.Queued,
		RunParams: map[string]any{}, Region: m.Run.RegionOrNil(), WorkflowID: run.JobRunWorkflowID(in.RunID)}
	failed := func(code, msg string, details map[string]any) (FireJobScheduleResult, error) {
		now := a.now()
		rec.CompletedAt = &now
		rec.SetOutcome(run.Outcome{Status: run.Failed, ErrorCode: code, ErrorMessage: msg, FailureClass: run.ClassConfig, ErrorDetails: details})
		if _, err := a.Store.CreateJobRun(ctx, rec); err != nil && !errors.Is(err, store.ErrConflict) {
			return FireJobScheduleResult{}, err
		}
		return FireJobScheduleResult{Failed: msg, RunID: rec.ID, JobVersionID: v.ID}, nil
	}
	// The defaults are given as the run's params, so they are checked
	// against their specs like params given to a manual start.
	defaults := map[string]any{}
	for name, p := range m.Job.Params {
		if p.Default != nil {
			defaults[name] = p.Default
		}
	}
	params, ps := manifests.ApplyParams(m.Job.Params, defaults)
	if ps != nil {
		problems := make([]any, len(ps))
		for i, p := range ps {
			problems[i] = map[string]any{"path": p.Path, "message": p.Message}
		}
		return failed("SCHEDULE_PARAMS_INVALID", "the scheduled run was not started: the defaults of the job's params do not validate: "+ps.Error(),
			map[string]any{"problems": problems})
	}
	rec.RunParams = params
	if _, err := a.Store.CreateJobRun(ctx, rec); err != nil && !errors.Is(err, store.ErrConflict) {
		return FireJobScheduleResult{}, err
	}
	return FireJobScheduleResult{RunID: rec.ID, JobVersionID: v.ID, Manifest: m, Params: params}, nil
}

// firedAlready answers a repeated firing from the run the first made.
func (a *Activities) firedAlready(ctx context.Context, r store.JobRun) (FireJobScheduleResult, error) {
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
	return FireJobScheduleResult{RunID: r.ID, JobVersionID: v.ID, Manifest: m, Params: r.RunParams}, nil
}

// FailScheduledJobRunInput marks a scheduled job run that could not be
// dispatched as failed.
type FailScheduledJobRunInput struct {
	RunID   string
	Message string
}

// FailScheduledJobRun records that a scheduled job run's workflow could not
// be started; a run that is already final is left alone.
func (a *Activities) FailScheduledJobRun(ctx context.Context, in FailScheduledJobRunInput) error {
	_, err := a.Store.UpdateJobRun(ctx, in.RunID, func(r *store.JobRun) error {
		if r.Status != run.Queued {
			return nil
		}
		now := a.now()
		r.CompletedAt = &now
		r.SetOutcome(run.Fail(run.CodeBadGateway, run.ClassPlatform, in.Message))
		return nil
	})
	return err
}
