package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/linefactory/linefactory/manifests"
	"github.com/linefactory/linefactory/store"
)

// Definitions is what firing a line schedule needs of the store.
type Definitions interface {
	JobLookup
	GetLineSchedule(ctx context.Context, line string) (store.LineSchedule, error)
	LatestLineVersion(ctx context.Context, name string) (store.LineVersion, error)
	CreateLineRun(ctx context.Context, r store.LineRun) (store.LineRun, error)
}

// FireScheduleInput is one firing of a line schedule.
type FireScheduleInput struct {
	LineName   string
	Generation int64
	FiredAt    time.Time
}

// FireScheduleResult is the line run a firing created, or why it was skipped.
type FireScheduleResult struct {
	Skipped       string
	RunID         string
	LineVersionID string
	Manifest      manifests.LineManifest
	Jobs          map[string]StageJob
	Params        map[string]any
	Trigger       map[string]any
}

// FireSchedule creates the line run of a schedule firing. A firing whose
// generation is not the schedule's current one (the schedule changed or was
// deleted since) or of a disabled schedule starts nothing.
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
	jobs, err := ResolveStageJobs(ctx, a.Definitions, m)
	if err != nil {
		return FireScheduleResult{Skipped: err.Error()}, nil
	}
	gen := sc.ScheduleGeneration
	trigger := map[string]any{"source": "schedule", "cron": sc.Cron, "timezone": sc.Timezone, "schedule_generation": gen,
		"fired_at": in.FiredAt.UTC().Format(time.RFC3339)}
	params := sc.Inputs
	if params == nil {
		params = map[string]any{}
	}
	id := store.NewID("lr_")
	vid := v.ID
	if _, err := a.Definitions.CreateLineRun(ctx, store.LineRun{ID: id, LineName: in.LineName, Status: StatusQueued, LineVersionID: &vid,
		RunParams: params, Trigger: store.TriggerSummary{Source: "schedule", Payload: trigger},
		TriggeredByActor: map[string]any{"type": "schedule", "schedule_generation": gen}, WorkflowID: "linerun/" + id}); err != nil {
		return FireScheduleResult{}, err
	}
	return FireScheduleResult{RunID: id, LineVersionID: v.ID, Manifest: m, Jobs: jobs, Params: params, Trigger: trigger}, nil
}
