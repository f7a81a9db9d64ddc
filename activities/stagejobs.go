package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/linefactory/linefactory/manifests"
	"github.com/linefactory/linefactory/store"
)

// StageJob is the job version a line stage runs, resolved at run start.
type StageJob struct {
	JobName      string
	JobVersionID string
	Manifest     manifests.JobManifest
}

// JobLookup finds job versions.
type JobLookup interface {
	GetJobVersion(ctx context.Context, name, versionID string) (store.JobVersion, error)
	LatestJobVersion(ctx context.Context, name string) (store.JobVersion, error)
}

// Errors of ResolveStageJobs.
var (
	// ErrStageJobMissing: a stage's job (or pinned version) no longer exists.
	ErrStageJobMissing = errors.New("stage job missing")
	// ErrStageJobUnsupported: a stage's job needs a step this server cannot run.
	ErrStageJobUnsupported = errors.New("stage job unsupported")
)

// ResolveStageJobs loads the job version every stage runs: its pinned
// version, else the job's latest version now.
func ResolveStageJobs(ctx context.Context, jobs JobLookup, m manifests.LineManifest) (map[string]StageJob, error) {
	out := map[string]StageJob{}
	for i, st := range m.Stages {
		var (
			v   store.JobVersion
			err error
		)
		if st.JobVersionID != "" {
			v, err = jobs.GetJobVersion(ctx, st.Job, st.JobVersionID)
		} else {
			v, err = jobs.LatestJobVersion(ctx, st.Job)
		}
		if errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("stages[%d]: job %q (version %q) no longer exists: %w", i, st.Job, st.JobVersionID, ErrStageJobMissing)
		}
		if err != nil {
			return nil, err
		}
		var jm manifests.JobManifest
		if err := json.Unmarshal(v.Manifest, &jm); err != nil {
			return nil, fmt.Errorf("decode job version %s: %w", v.ID, err)
		}
		if msg := manifests.UnsupportedStep(jm); msg != "" {
			return nil, fmt.Errorf("stage %s (job %s): %s: %w", st.ID, st.Job, msg, ErrStageJobUnsupported)
		}
		out[st.ID] = StageJob{JobName: st.Job, JobVersionID: v.ID, Manifest: jm}
	}
	return out, nil
}

// StageManifests returns the job manifests of resolved stage jobs, by stage.
func StageManifests(jobs map[string]StageJob) map[string]*manifests.JobManifest {
	out := make(map[string]*manifests.JobManifest, len(jobs))
	for id, j := range jobs {
		jm := j.Manifest
		out[id] = &jm
	}
	return out
}
