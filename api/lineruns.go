package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"
	"go.temporal.io/api/serviceerror"

	"github.com/linefactory/linefactory/admit"
	"github.com/linefactory/linefactory/manifests"
	"github.com/linefactory/linefactory/manifests/run"
	"github.com/linefactory/linefactory/store"
	"github.com/linefactory/linefactory/workflows"
)

// LineRunStore is what the line-run endpoints need of the store.
type LineRunStore interface {
	GetLineVersionByID(ctx context.Context, id string) (store.LineVersion, error)
	CreateLineRun(ctx context.Context, r store.LineRun) (store.LineRun, error)
	GetLineRun(ctx context.Context, id string) (store.LineRun, error)
	GetLineRunJSON(ctx context.Context, id string) (json.RawMessage, error)
	ListLineRuns(ctx context.Context, f store.LineRunFilter) ([]store.LineRun, error)
	ListLineRunsJSON(ctx context.Context, f store.LineRunFilter) ([]json.RawMessage, error)
	UpdateLineRun(ctx context.Context, id string, change func(*store.LineRun) error) (store.LineRun, error)
	FindLineRunsByDelivery(ctx context.Context, source, deliveryID string) ([]store.LineRun, error)
}

// resolveStageJobs loads the job version every stage runs now.
func (s *Server) resolveStageJobs(ctx context.Context, m manifests.LineManifest) (map[string]workflows.StageJob, error) {
	jobs, err := manifests.ResolveStageJobs(m, store.JobVersionLoader(ctx, s.store))
	switch {
	case errors.Is(err, manifests.ErrStageJobMissing):
		return nil, httpError(http.StatusConflict, CodeInvalidRequest, "%v", err)
	}
	return jobs, err
}

type startLineRunRequest struct {
	Params map[string]any `json:"params"`
}

func (s *Server) startLineRun(c *gin.Context) error {
	ctx := c.Request.Context()
	name := c.Param("name")
	var req startLineRunRequest
	if err := bindJSON(c, &req); err != nil {
		return err
	}
	if le := manifests.CheckParamsSize(req.Params); le != nil {
		return le
	}
	v, err := s.store.LatestLineVersion(ctx, name)
	if err != nil {
		if _, lerr := s.store.GetLine(ctx, name); lerr != nil {
			return lerr
		}
		return err
	}
	var m manifests.LineManifest
	if err := json.Unmarshal(v.Manifest, &m); err != nil {
		return fmt.Errorf("decode line version %s: %w", v.ID, err)
	}
	// The run params are checked against the job versions the run will use
	// (resolved now), not the deployment's input_params, which go stale when
	// an unpinned job gets a new version.
	jobs, err := s.resolveStageJobs(ctx, m)
	if err != nil {
		return err
	}
	params, ps := manifests.ApplyLineRunParams(&m, manifests.StageManifests(jobs), req.Params)
	if ps != nil {
		return problemsInvalid(ps)
	}
	rec, err := s.launchLineJobs(ctx, name, v, m, jobs, params, store.TriggerSummary{Source: "manual", Payload: map[string]any{"source": "manual"}}, c.GetString(actorKey))
	if err != nil {
		return err
	}
	c.JSON(http.StatusCreated, lineRunResponse(rec))
	return nil
}

// launchLine records a new trigger-started line run of version v and starts
// its manager. The event itself is fine, so a run that cannot start (params
// that do not fit, a stage job missing, the engine refusing
// it) is recorded as a failed run and returned without an error: the
// delivery's other runs stand and a retry of it is a repeat. The error is
// store.ErrConflict when the delivery already started a run of this line;
// then nothing was dispatched.
func (s *Server) launchLine(ctx context.Context, name string, v store.LineVersion, m manifests.LineManifest, params map[string]any,
	trigger store.TriggerSummary, actor string) (store.LineRun, error) {
	if s.cfg.Runs == nil {
		return store.LineRun{}, errNoEngine()
	}
	jobs, err := manifests.ResolveStageJobs(m, store.JobVersionLoader(ctx, s.store))
	if errors.Is(err, manifests.ErrStageJobMissing) {
		return s.failedLineRun(ctx, name, v, params, trigger, actor, run.DispatchFailed, "the line run could not be dispatched: "+err.Error())
	}
	if err != nil {
		return store.LineRun{}, err
	}
	// The line's trigger config or the sender's payload is at fault when the
	// params do not fit: the run's failure, as for a manual start's 422.
	if le := manifests.CheckParamsSize(params); le != nil {
		return s.failedLineRun(ctx, name, v, params, trigger, actor, run.StageParamsInvalid, "the trigger's params are too large: "+le.Error())
	}
	checked, ps := manifests.ApplyLineRunParams(&m, manifests.StageManifests(jobs), params)
	if ps != nil {
		return s.failedLineRun(ctx, name, v, params, trigger, actor, run.StageParamsInvalid,
			"the trigger's params do not fit the line's params: "+strings.ReplaceAll(ps.Error(), "\n", "; "))
	}
	rec, err := s.launchLineJobs(ctx, name, v, m, jobs, checked, trigger, actor)
	if errors.Is(err, admit.ErrNotDispatched) && rec.Status == run.Failed {
		return rec, nil // recorded failed: the delivery answers it
	}
	return rec, err
}

// failedLineRun records a line run that failed before it could start.
func (s *Server) failedLineRun(ctx context.Context, name string, v store.LineVersion, params map[string]any,
	trigger store.TriggerSummary, actor string, code run.FailureCode, msg string) (store.LineRun, error) {
	vid, id, now := v.ID, run.NewLineRunID(), s.now()
	return s.store.CreateLineRun(ctx, store.LineRun{ID: id, LineName: name, Status: run.Failed, LineVersionID: &vid,
		RunParams: params, Trigger: trigger, TriggeredByActor: map[string]any{"type": "token", "name": actor},
		WorkflowID: run.LineRunWorkflowID(id), CreatedAt: now, StartedAt: &now, CompletedAt: &now, ErrorMessage: &msg,
		Failure: store.NewLineRunFailure(*run.NewFailure(code, msg))})
}

func errNoEngine() error {
	return httpError(http.StatusServiceUnavailable, CodeResourceUnavailable, "this server runs no workflow engine")
}

// launchLineJobs is launchLine with the stages' job versions resolved: the
// run is admitted (admitLineRun), so a record the store refuses
// (store.ErrConflict) never reaches the engine.
func (s *Server) launchLineJobs(ctx context.Context, name string, v store.LineVersion, m manifests.LineManifest, jobs map[string]workflows.StageJob,
	params map[string]any, trigger store.TriggerSummary, actor string) (store.LineRun, error) {
	if s.cfg.Runs == nil {
		return store.LineRun{}, errNoEngine()
	}
	vid := v.ID
	id := run.NewLineRunID()
	rec := store.LineRun{ID: id, LineName: name, Status: run.Queued, LineVersionID: &vid,
		RunParams: params, Trigger: trigger, TriggeredByActor: map[string]any{"type": "token", "name": actor},
		WorkflowID: run.LineRunWorkflowID(id)}
	in := workflows.LineRunInput{Version: workflows.LineRunInputVersion, RunID: id, LineName: name, LineVersionID: v.ID, Manifest: m, Jobs: jobs, Params: params, Trigger: trigger.Payload}
	return s.admitLineRun(ctx, rec, in)
}

// admitLineRun admits the line run rec (package admit) and starts its
// manager with in. When the engine does not take it, the run is returned as
// stored (failed dispatch_failed) with an error that is
// admit.ErrNotDispatched and answers 502.
func (s *Server) admitLineRun(ctx context.Context, rec store.LineRun, in workflows.LineRunInput) (store.LineRun, error) {
	got, err := s.admission().LineRun(ctx, rec, func(ctx context.Context) error { return s.cfg.Runs.StartLineRun(ctx, in) })
	if errors.Is(err, admit.ErrNotDispatched) {
		s.log.Warn("line run not dispatched", "run_id", rec.ID, "error", err.Error())
		return got, fmt.Errorf("%w: %w", err, httpError(http.StatusBadGateway, CodeBadGateway, "the workflow engine did not accept line run %s", rec.ID))
	}
	return got, err
}

func problemsInvalid(ps manifests.Problems) error {
	return &InvalidInput{Detail: problemDetail(ps)}
}

// problemDetail turns problems located in a request body into validation
// details: "params.who" is at ["body", "params", "who"].
func problemDetail(ps manifests.Problems) []FieldError {
	detail := make([]FieldError, len(ps))
	for i, p := range ps {
		loc := []any{"body"}
		for _, part := range strings.Split(p.Path, ".") {
			loc = append(loc, part)
		}
		detail[i] = FieldError{Loc: loc, Msg: p.Message, Type: "value_error"}
	}
	return detail
}

func (s *Server) listLineRuns(c *gin.Context) error {
	ctx := c.Request.Context()
	limit, offset, err := page(c)
	if err != nil {
		return err
	}
	// The store cuts the details out of each stored document, which makes
	// it a LineRunListItem's JSON (runviews_test.go): the items are passed
	// on without being decoded.
	runs, err := s.store.ListLineRunsJSON(ctx, store.LineRunFilter{LineName: c.Param("name"), Limit: limit, Offset: offset})
	if err != nil {
		return err
	}
	// Runs are only ever started of a deployed line, and lines are never
	// deleted: a page with runs needs no look-up of the line, an empty one
	// tells an unknown line (404) from one without runs (here).
	if len(runs) == 0 {
		if _, err := s.store.GetLine(ctx, c.Param("name")); err != nil {
			return err
		}
	}
	return writeRawRunList(c, runs)
}

// jsonArray joins JSON values into a JSON array.
func jsonArray(items []json.RawMessage) []byte {
	n := 2
	for _, it := range items {
		n += len(it) + 1
	}
	out := make([]byte, 0, n)
	out = append(out, '[')
	for i, it := range items {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, it...)
	}
	return append(out, ']')
}

// getLineRun answers with the stored run document as is: it is the
// LineRunResponse's JSON already (runviews_test.go).
func (s *Server) getLineRun(c *gin.Context) error {
	doc, err := s.store.GetLineRunJSON(c.Request.Context(), c.Param("run_id"))
	if err != nil {
		return err
	}
	writeJSONDoc(c, doc)
	return nil
}

func (s *Server) stopLineRun(c *gin.Context) error {
	ctx := c.Request.Context()
	var req stopRequest
	if err := bindJSON(c, &req); err != nil {
		return err
	}
	r, err := s.store.GetLineRun(ctx, c.Param("run_id"))
	if err != nil {
		return err
	}
	if !run.LineRun.Terminal(r.Status) {
		if s.cfg.Runs == nil {
			return httpError(http.StatusServiceUnavailable, CodeResourceUnavailable, "this server runs no workflow engine")
		}
		reason := "stopped by " + c.GetString(actorKey)
		if req.Reason != nil && *req.Reason != "" {
			reason = *req.Reason
		}
		// The status is checked again inside the update: a run that ended
		// since it was read is left unchanged.
		if r, err = s.store.UpdateLineRun(ctx, r.ID, func(r *store.LineRun) error {
			if !run.LineRun.Terminal(r.Status) {
				r.StopReason = &reason
			}
			return nil
		}); err != nil {
			return err
		}
		if !run.LineRun.Terminal(r.Status) {
			if err := s.cfg.Runs.CancelLineRun(ctx, r.ID); err != nil {
				// The run may have ended between the read and the cancel:
				// then the stop is a no-op, answered with the run as it is.
				again, gerr := s.store.GetLineRun(ctx, r.ID)
				if gerr != nil {
					return gerr
				}
				if !run.LineRun.Terminal(again.Status) && !workflowGone(err) {
					return httpError(http.StatusBadGateway, CodeBadGateway, "the workflow engine did not accept the stop of %s", r.ID)
				}
				r = again
			}
			if !run.LineRun.Terminal(r.Status) {
				s.endStoppedLineRun(ctx, r, reason)
				if r, err = s.store.GetLineRun(ctx, r.ID); err != nil {
					return err
				}
			}
		}
	}
	c.JSON(http.StatusAccepted, lineRunResponse(r))
	return nil
}

// workflowGone tells an engine error that says the workflow no longer runs
// (not found, or already completed).
func workflowGone(err error) bool {
	var nf *serviceerror.NotFound
	return errors.As(err, &nf)
}

type controlRequest struct {
	Action       *string `json:"action"`
	FromStage    *string `json:"from_stage"`
	TransitionID *string `json:"transition_id"`
	Option       *string `json:"option"`
	Reason       *string `json:"reason"`
}

func (s *Server) controlLineRun(c *gin.Context) error {
	ctx := c.Request.Context()
	var req controlRequest
	if err := bindJSON(c, &req); err != nil {
		// API.md: an invalid control carries its failure code in detail[].type.
		var bad *InvalidInput
		if errors.As(err, &bad) {
			for i := range bad.Detail {
				bad.Detail[i].Type = "control_payload_invalid"
			}
		}
		return err
	}
	r, err := s.store.GetLineRun(ctx, c.Param("run_id"))
	if err != nil {
		return err
	}
	switch {
	case req.Action == nil:
		return invalid("control_payload_invalid", "action is required: select or retry", "body", "action")
	case *req.Action == "select":
		return s.selectOption(c, r, req) // selection.go
	case *req.Action != "retry":
		return invalid("control_payload_invalid", "action must be select or retry", "body", "action")
	}
	return s.retryLineRun(c, r, req.FromStage)
}

// retryLineRun starts a new line run that begins at the failed stage (or
// fromStage) with the earlier visits carried over (retrySnapshot).
func (s *Server) retryLineRun(c *gin.Context, old store.LineRun, fromStage *string) error {
	ctx := c.Request.Context()
	from := ""
	if fromStage != nil {
		if *fromStage == "" {
			return invalid("retry_snapshot_invalid", "from_stage must name a stage", "body", "from_stage")
		}
		from = *fromStage
	}
	plan, err := retrySnapshot(old, from, s.jobRunValues(ctx))
	if err != nil {
		loc := "from_stage"
		if old.Status != run.Failed {
			loc = "action"
		}
		return invalid("retry_snapshot_invalid", strings.TrimSuffix(err.Error(), ": "+errRetrySnapshot.Error()), "body", loc)
	}
	v, err := s.store.GetLineVersionByID(ctx, *old.LineVersionID)
	if err != nil {
		return err
	}
	var m manifests.LineManifest
	if err := json.Unmarshal(v.Manifest, &m); err != nil {
		return err
	}
	if _, ok := findLineStage(m, plan.State.Stage); !ok {
		return invalid("retry_snapshot_invalid", fmt.Sprintf("stage %q is not in line version %s", plan.State.Stage, v.ID), "body", "from_stage")
	}
	jobs, err := s.resolveStageJobs(ctx, m)
	if err != nil {
		return err
	}
	if s.cfg.Runs == nil {
		return httpError(http.StatusServiceUnavailable, CodeResourceUnavailable, "this server runs no workflow engine")
	}
	id := run.NewLineRunID()
	oldID := old.ID
	plan.State.StartedAt = s.now()
	carried := carriedVisits(old, plan.Carried)
	rec := store.LineRun{ID: id, LineName: old.LineName, Status: run.Queued, LineVersionID: old.LineVersionID,
		RunParams: old.RunParams, Trigger: old.Trigger, RetryOf: &oldID, Stages: carried, StageOutputs: plan.Outputs,
		Transitions: append([]store.TakenTransition{}, old.Transitions[:plan.Transitions]...), TriggeredByActor: map[string]any{"type": "token", "name": c.GetString(actorKey)},
		WorkflowID: run.LineRunWorkflowID(id)}
	for _, st := range carried {
		rec.ComputeCostCents += st.ComputeCostCents
		rec.InferenceCostCents += st.InferenceCostCents
		if st.CostRatedAt != nil && (rec.CostRatedAt == nil || st.CostRatedAt.After(*rec.CostRatedAt)) {
			rec.CostRatedAt = st.CostRatedAt
		}
	}
	rec.TotalCostCents = rec.ComputeCostCents + rec.InferenceCostCents
	in := workflows.LineRunInput{Version: workflows.LineRunInputVersion, RunID: id, LineName: old.LineName, LineVersionID: v.ID, Manifest: m, Jobs: jobs, Params: old.RunParams,
		Trigger: old.Trigger.Payload, State: plan.State}
	created, err := s.admitLineRun(ctx, rec, in)
	if err != nil {
		return err
	}
	c.JSON(http.StatusAccepted, lineRunResponse(created))
	return nil
}

func findLineStage(m manifests.LineManifest, id string) (manifests.LineStage, bool) {
	for _, s := range m.Stages {
		if s.ID == id {
			return s, true
		}
	}
	return manifests.LineStage{}, false
}
