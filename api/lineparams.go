package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/linefactory/linefactory/manifests"
	"github.com/linefactory/linefactory/store"
	"github.com/linefactory/linefactory/workflows"
)

// lineRunParams checks the params a line run is started with (a manual
// start's params, a schedule's inputs) against the line's inputs as the
// stages' jobs resolve now, and returns them with defaults applied.
// Problems are located at "params.<name>".
func lineRunParams(m *manifests.LineManifest, jobs map[string]*manifests.JobManifest, given map[string]any) (map[string]any, manifests.Problems) {
	// Conflicting bindings were refused at deploy; if the jobs changed
	// since, a value cannot fit both and is refused below.
	inputs, _ := manifests.LineInputs(m, jobs)
	return manifests.ApplyLineParams(inputs, given)
}

// stageManifests returns the job manifests of resolved stage jobs, by stage.
func stageManifests(jobs map[string]workflows.StageJob) map[string]*manifests.JobManifest {
	out := make(map[string]*manifests.JobManifest, len(jobs))
	for id, j := range jobs {
		jm := j.Manifest
		out[id] = &jm
	}
	return out
}

// loadStageJobs loads the job manifest each stage resolves to now (the pinned
// version, else the job's latest). A stage whose job or version does not
// exist is left out; a job that exists with no version is a problem at
// stages[i].job (unknown jobs and versions are CheckLineJobs' to report).
func (s *Server) loadStageJobs(ctx context.Context, m *manifests.LineManifest) (map[string]*manifests.JobManifest, manifests.Problems, error) {
	out := map[string]*manifests.JobManifest{}
	var ps manifests.Problems
	for i, st := range m.Stages {
		if st.Job == "" {
			continue
		}
		var (
			v   store.JobVersion
			err error
		)
		if st.JobVersionID != "" {
			v, err = s.store.GetJobVersion(ctx, st.Job, st.JobVersionID)
		} else {
			v, err = s.store.LatestJobVersion(ctx, st.Job)
			if errors.Is(err, store.ErrNotFound) {
				if _, jerr := s.store.GetJob(ctx, st.Job); jerr == nil {
					ps = append(ps, manifests.Problem{Path: fmt.Sprintf("stages[%d].job", i), Message: "job " + st.Job + " has no version"})
				}
			}
		}
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		var jm manifests.JobManifest
		if err := json.Unmarshal(v.Manifest, &jm); err != nil {
			return nil, nil, fmt.Errorf("decode job version %s: %w", v.ID, err)
		}
		out[st.ID] = &jm
	}
	return out, ps, nil
}

// relocate moves problems located under from (e.g. "params") to to (e.g.
// "trigger.inputs").
func relocate(ps manifests.Problems, from, to string) manifests.Problems {
	out := make(manifests.Problems, len(ps))
	for i, p := range ps {
		if rest, ok := strings.CutPrefix(p.Path, from); ok && (rest == "" || rest[0] == '.') {
			p.Path = to + rest
		}
		out[i] = p
	}
	return out
}
