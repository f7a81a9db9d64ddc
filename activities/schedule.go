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

// Definitions is what firing a line schedule needs of the store.
type Definitions interface {
	store.JobVersionLookup
	GetLineSchedule(ctx context.Context, line string) (store.LineSchedule, error)
	LatestLineVersion(ctx context.Context, name string) (store.LineVersion, error)
	CreateLineRun(ctx context.Context, r store.LineRun) (store.LineRun, error)
}

// FireScheduleInput is one firing of a line schedule. RunID is the id of
// the line run it makes, chosen by the firing workflow so a retried
// activity makes the same run. Admit says the activity admits the run
// itself (records it, starts its manager, records the engine's refusal:
// package admit); without it (firings begun before that, replayed) it only
// records the run and the workflow starts the manager.
type FireScheduleInput struct {
	LineName   string
	Generation int64
	FiredAt    time.Time
	RunID      string
	Admit      bool
}

// FireScheduleResult is the line run a firing created, or why it was
// skipped. Failed says the run was recorded failed (its stage jobs cannot be
// resolved, or the schedule's inputs do not fit the entry job) and is not
// to be started. Manifest, Jobs, Params and Trigger are the manager's input,
// given only to a firing that starts the manager itself (not Admit).
type FireScheduleResult struct {
	Skipped       string
	Failed        string
	RunID         string
	LineVersionID string
	Manifest      manifests.LineManifest
	Jobs          map[string]manifests.StageJob
	Params        map[string]any
	Trigger       map[string]any
}

// FiredLineRun is the manager's input of a line run a schedule fired.
type FiredLineRun struct {
	RunID         string
	LineName      string
	LineVersionID string
	Manifest      manifests.LineManifest
	Jobs          map[string]manifests.StageJob
	Params        map[string]any
	Trigger       map[string]any
}

// FireSchedule makes the line run of a schedule firing (idempotent on
// in.RunID). A firing whose generation is not the schedule's current one
// (the schedule changed or was deleted since) or of a disabled schedule
// starts nothing. The schedule's inputs are checked and defaulted against
// the entry job like a manual start's params; a firing that cannot run is
// recorded as a failed line run. With in.Admit the run is admitted: a
// manager the engine refuses leaves the run failed dispatch_failed and the
// activity fails (not retried).
func (a *Activities) FireSchedule(ctx context.Context, in FireScheduleInput) (FireScheduleResult, error) {
	if a.Definitions == nil {
		return FireScheduleResult{}, permanent("SCHEDULES_UNAVAILABLE", errors.New("this worker has no definitions store"))
	}
	sc, skipped, err := a.firedSchedule(ctx, in)
	if err != nil || skipped != "" {
		return FireScheduleResult{Skipped: skipped}, err
	}
	v, err := a.Definitions.LatestLineVersion(ctx, in.LineName)
	if err != nil {
		return FireScheduleResult{}, err
	}
	var m manifests.LineManifest
	if err := json.Unmarshal(v.Manifest, &m); err != nil {
		return FireScheduleResult{}, permanent("LINE_INVALID", err)
	}
	rec, fired := firedLineRun(in, sc, v, m)
	jobs, err := manifests.ResolveStageJobs(m, store.JobVersionLoader(ctx, a.Definitions))
	if errors.Is(err, manifests.ErrStageJobMissing) {
		return a.failedFiring(ctx, rec, run.NewFailure(run.DispatchFailed, "the line run could not be dispatched: "+err.Error()))
	}
	if err != nil {
		return FireScheduleResult{}, err
	}
	// The inputs are checked as a manual start's params are: their size,
	// then against the entry job and every input binding, as the jobs
	// resolve now.
	var f *run.Failure
	var params map[string]any
	if le := manifests.CheckParamsSize(sc.Inputs); le != nil {
		f = run.NewFailure(run.StageParamsInvalid, "the schedule's inputs are too large: "+le.Error())
	} else if p, ps := manifests.ApplyLineRunParams(&m, manifests.StageManifests(jobs), sc.Inputs); ps != nil {
		f = run.NewFailure(run.StageParamsInvalid, "the schedule's inputs do not fit the line's params: "+ps.Error())
	} else {
		params = p
	}
	if f != nil {
		if len(m.Stages) > 0 {
			f.StageName = m.Stages[0].ID
		}
		return a.failedFiring(ctx, rec, f)
	}
	rec.RunParams, fired.Jobs, fired.Params = params, jobs, params
	if in.Admit {
		return a.admitFiredLineRun(ctx, rec, fired)
	}
	if _, err := a.Definitions.CreateLineRun(ctx, rec); err != nil && !errors.Is(err, store.ErrConflict) {
		return FireScheduleResult{}, err
	}
	return FireScheduleResult{RunID: rec.ID, LineVersionID: v.ID, Manifest: m, Jobs: jobs, Params: params, Trigger: fired.Trigger}, nil
}

// firedSchedule is the schedule a firing is of, or why it starts nothing.
func (a *Activities) firedSchedule(ctx context.Context, in FireScheduleInput) (store.LineSchedule, string, error) {
	sc, err := a.Definitions.GetLineSchedule(ctx, in.LineName)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return sc, "the schedule was deleted", nil
	case err != nil:
		return sc, "", err
	case sc.ScheduleGeneration != in.Generation:
		return sc, fmt.Sprintf("stale firing of generation %d (current %d)", in.Generation, sc.ScheduleGeneration), nil
	case !sc.Enabled:
		return sc, "the schedule is disabled", nil
	}
	return sc, "", nil
}

// firedLineRun is the queued record and the manager's input of a firing
// (params not applied yet).
func firedLineRun(in FireScheduleInput, sc store.LineSchedule, v store.LineVersion, m manifests.LineManifest) (store.LineRun, FiredLineRun) {
	gen := sc.ScheduleGeneration
	trigger := map[string]any{"source": "schedule", "cron": sc.Cron, "timezone": sc.Timezone, "schedule_generation": gen,
		"fired_at": in.FiredAt.UTC().Format(time.RFC3339)}
	id := in.RunID
	if id == "" {
		id = run.NewLineRunID()
	}
	vid := v.ID
	rec := store.LineRun{ID: id, LineName: in.LineName, Status: run.Queued, LineVersionID: &vid, RunParams: sc.Inputs,
		Trigger:          store.TriggerSummary{Source: "schedule", Payload: trigger},
		TriggeredByActor: map[string]any{"type": "schedule", "schedule_generation": gen}, WorkflowID: run.LineRunWorkflowID(id)}
	return rec, FiredLineRun{RunID: id, LineName: in.LineName, LineVersionID: v.ID, Manifest: m, Trigger: trigger}
}

// failedFiring records the run of a firing that cannot run as failed with f.
func (a *Activities) failedFiring(ctx context.Context, rec store.LineRun, f *run.Failure) (FireScheduleResult, error) {
	now := a.now()
	rec.Status, rec.CompletedAt, rec.ErrorMessage = run.Failed, &now, &f.ErrorMessage
	rec.Failure = store.NewLineRunFailure(*f)
	if _, err := a.Definitions.CreateLineRun(ctx, rec); err != nil && !errors.Is(err, store.ErrConflict) {
		return FireScheduleResult{}, err
	}
	return FireScheduleResult{Failed: f.ErrorMessage, RunID: rec.ID, LineVersionID: *rec.LineVersionID}, nil
}

// admitFiredLineRun admits the run of a firing and starts its manager.
func (a *Activities) admitFiredLineRun(ctx context.Context, rec store.LineRun, fired FiredLineRun) (FireScheduleResult, error) {
	if a.Admit == nil || a.Starts == nil {
		return FireScheduleResult{}, permanent("SCHEDULES_UNAVAILABLE", errors.New("this worker cannot start runs"))
	}
	got, err := a.Admit.LineRun(ctx, rec, func(ctx context.Context) error { return a.Starts.StartFiredLineRun(ctx, fired) })
	if err != nil {
		return FireScheduleResult{}, admissionError(err)
	}
	res := FireScheduleResult{RunID: got.ID, LineVersionID: fired.LineVersionID}
	if got.Status == run.Failed && got.StartedAt == nil && got.ErrorMessage != nil {
		res.Failed = *got.ErrorMessage // an earlier try's run that could not start
	}
	return res, nil
}
