package manifests

import (
	"encoding/json"
	"errors"
	"fmt"
)

// StageJob is the job version a line stage runs, resolved at run start.
type StageJob struct {
	JobName      string
	JobVersionID string
	Manifest     JobManifest
}

// JobVersionLoader loads a job version: the pinned one, or the job's latest
// when versionID is empty. found is false when the job or version does not
// exist; err is any other failure.
type JobVersionLoader func(job, versionID string) (id string, manifest []byte, found bool, err error)

// Errors of ResolveStageJobs.
var (
	// ErrStageJobMissing: a stage's job (or pinned version) no longer exists.
	ErrStageJobMissing = errors.New("stage job missing")
	// ErrStageJobUnsupported: a stage's job needs a step this server cannot run.
	ErrStageJobUnsupported = errors.New("stage job unsupported")
)

// ResolveStageJobs loads the job version every stage of m runs: its pinned
// version, else the job's latest version now.
func ResolveStageJobs(m LineManifest, load JobVersionLoader) (map[string]StageJob, error) {
	out := map[string]StageJob{}
	for i, st := range m.Stages {
		id, raw, found, err := load(st.Job, st.JobVersionID)
		if err != nil {
			return nil, err
		}
		if !found {
			return nil, fmt.Errorf("stages[%d]: job %q (version %q) no longer exists: %w", i, st.Job, st.JobVersionID, ErrStageJobMissing)
		}
		var jm JobManifest
		if err := json.Unmarshal(raw, &jm); err != nil {
			return nil, fmt.Errorf("decode job version %s: %w", id, err)
		}
		if msg := UnsupportedStep(jm); msg != "" {
			return nil, fmt.Errorf("stage %s (job %s): %s: %w", st.ID, st.Job, msg, ErrStageJobUnsupported)
		}
		out[st.ID] = StageJob{JobName: st.Job, JobVersionID: id, Manifest: jm}
	}
	return out, nil
}

// StageManifests returns the job manifests of resolved stage jobs, by stage.
func StageManifests(jobs map[string]StageJob) map[string]*JobManifest {
	out := make(map[string]*JobManifest, len(jobs))
	for id, j := range jobs {
		jm := j.Manifest
		out[id] = &jm
	}
	return out
}
