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
// activity makes the same run.
type FireScheduleInput struct {
	LineName   string
	Generation int64
	FiredAt    time.Time
	RunID      string
}

// FireScheduleResult is the line run a firing created, or why it was
// skipped. Failed says the run was recorded failed (its stage jobs cannot be
// resolved, or the schedule's inputs do not fit the entry job) and is not
// to be started.
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

// FireSchedule creates the line run of a schedule firing (idempotent on
// in.RunID). A firing whose generation is not the schedule's current one
// (the schedule changed or was deleted since) or of a disabled schedule
// starts nothing. The schedule's inputs are checked and defaulted against
// the entry job like a manual start's params; a firing that cannot run is
// recorded as a failed line run.
func (a *Activities) FireSchedule(ctx context.Context, in FireScheduleInput) (FireScheduleResult, error) {
	if a.Definitions == nil {
		return FireScheduleResult{}, permanent("SCHEDULES_UNAVAILABLE", errors.New("this worker has no definitions store"))
	}
	sc, err := a.Definitions.GetLineSchedule(ctx, in.LineName)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return FireScheduleResult{Skipped: "the schedule was deleted"}, nil
	case err != nil:
		return FireScheduleResult{}, err
	case sc.ScheduleGeneration != in.Generation:
		return FireScheduleResult{Skipped: fmt.Sprintf("stale firing of generation %d (current %d)", in.Generation, sc.ScheduleGeneration)}, nil
	case !sc.Enabled:
		return FireScheduleResult{Skipped: "the schedule is disabled"}, nil
	}
	v, err := a.Definitions.LatestLineVersion(ctx, in.LineName)
	if err != nil {
		return FireScheduleResult{}, err
	}
	var m manifests.LineManifest
	if err := json.Unmarshal(v.Manifest, &m); err != nil {
		return FireScheduleResult{}, permanent("LINE_INVALID", err)
	}
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
	failed := func(code run.FailureCode, msg string, stage string) (FireScheduleResult, error) {
		now := a.now()
		rec.Status, rec.CompletedAt, rec.ErrorMessage = run.Failed, &now, &msg
		f := run.NewFailure(code, msg)
		f.StageName = stage
		rec.Failure = store.NewLineRunFailure(*f)
		if _, err := a.Definitions.CreateLineRun(ctx, rec); err != nil && !errors.Is(err, store.ErrConflict) {
			return FireScheduleResult{}, err
		}
		return FireScheduleResult{Failed: msg, RunID: id, LineVersionID: v.ID}, nil
	}
	jobs, err := manifests.ResolveStageJobs(m, store.JobVersionLoader(ctx, a.Definitions))
	if errors.Is(err, manifests.ErrStageJobMissing) {
		return failed(run.DispatchFailed, "the line run could not be dispatched: "+err.Error(), "")
	}
	if err != nil {
		return FireScheduleResult{}, err
	}
	var entry string
	if len(m.Stages) > 0 {
		entry = m.Stages[0].ID
	}
	// The inputs are checked as a manual start's params are: their size,
	// then against the entry job and every input binding, as the jobs
	// resolve now.
	if le := manifests.CheckParamsSize(sc.Inputs); le != nil {
		return failed(run.StageParamsInvalid, "the schedule's inputs are too large: "+le.Error(), entry)
	}
	params, ps := manifests.ApplyLineRunParams(&m, manifests.StageManifests(jobs), sc.Inputs)
	if ps != nil {
		return failed(run.StageParamsInvalid, "the schedule's inputs do not fit the line's params: "+ps.Error(), entry)
	}
	rec.RunParams = params
	if _, err := a.Definitions.CreateLineRun(ctx, rec); err != nil && !errors.Is(err, store.ErrConflict) {
		return FireScheduleResult{}, err
	}
	return FireScheduleResult{RunID: id, LineVersionID: v.ID, Manifest: m, Jobs: jobs, Params: params, Trigger: trigger}, nil
}
