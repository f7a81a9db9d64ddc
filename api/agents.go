package api

import (
	"context"
	"errors"
	"fmt"

	"github.com/linefactory/linefactory/manifests"
	"github.com/linefactory/linefactory/store"
)

// knowledgeExists reports, per slug, whether a knowledge item exists.
func (s *Server) knowledgeExists(ctx context.Context, uses []manifests.KnowledgeUse) (func(string) bool, error) {
	found := map[string]bool{}
	for _, u := range uses {
		if _, done := found[u.Slug]; done {
			continue
		}
		_, _, err := s.store.GetKnowledge(ctx, u.Slug)
		switch {
		case err == nil:
			found[u.Slug] = true
		case errors.Is(err, store.ErrNotFound):
			found[u.Slug] = false
		default:
			return nil, err
		}
	}
	return func(slug string) bool { return found[slug] }, nil
}

// checkJobAgents is the deploy check of a job's run_agent steps against the
// server configuration and of its knowledge slugs against the store.
func (s *Server) checkJobAgents(ctx context.Context, m *manifests.JobManifest) (manifests.Problems, error) {
	ps := manifests.CheckAgentSteps(m, s.cfg.Agents)
	uses := manifests.JobKnowledge(m)
	exists, err := s.knowledgeExists(ctx, uses)
	if err != nil {
		return nil, err
	}
	return append(ps, manifests.CheckKnowledge(uses, exists)...), nil
}

// checkLineAgents is the deploy check of a line's knowledge slugs and of
// its stage jobs' run_agent steps (the configuration may have changed since
// the jobs were deployed), located at the stage.
func (s *Server) checkLineAgents(ctx context.Context, m *manifests.LineManifest, jobs map[string]*manifests.JobManifest) (manifests.Problems, error) {
	uses := manifests.LineKnowledge(m)
	exists, err := s.knowledgeExists(ctx, uses)
	if err != nil {
		return nil, err
	}
	ps := manifests.CheckKnowledge(uses, exists)
	for i, st := range m.Stages {
		jm := jobs[st.ID]
		if jm == nil {
			continue
		}
		for _, p := range manifests.CheckAgentSteps(jm, s.cfg.Agents) {
			ps = append(ps, manifests.Problem{Path: fmt.Sprintf("stages[%d].job", i), Message: fmt.Sprintf("job %s: %s", st.Job, p)})
		}
	}
	return ps, nil
}
