package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/linefactory/linefactory/manifests"
	"github.com/linefactory/linefactory/store"
)

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
