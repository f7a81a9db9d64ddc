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

// ErrStageJobMissing (of ResolveStageJobs): a stage's job (or pinned
// version) no longer exists.
var ErrStageJobMissing = errors.New("stage job missing")

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
