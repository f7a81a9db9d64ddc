package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/temporal"

	"github.com/linefactory/linefactory/manifests/run"
	"github.com/linefactory/linefactory/store"
	"github.com/linefactory/linefactory/workflows"
)

// Selector answers a waiting line run (the engine's select Update); the
// engine behind Config.Runs implements it when it runs line runs.
type Selector interface {
	SelectLineRun(ctx context.Context, runID string, in workflows.SelectInput) (store.LineRun, error)
}

// selectCodes are the refusals of the select Update's validator, answered
// 422 with the code in detail[].type.
var selectCodes = map[string]bool{workflows.CodeControlMissingID: true, workflows.CodeControlTargetInvalid: true,
	workflows.CodeControlUnknownOption: true, workflows.CodeControlWaitExpired: true, workflows.CodeControlPayloadInvalid: true}

// selectLocs says where in the body a refused select is wrong.
var selectLocs = map[string]string{workflows.CodeControlUnknownOption: "option", workflows.CodeControlTargetInvalid: "transition_id",
	workflows.CodeControlWaitExpired: "transition_id"}

// selectOption answers a waiting run's agentic transition with an option:
// the run's manager checks it (an Update validator, so a refused select
// leaves no trace in the run's history) and the run goes on running. A run
// whose wait expired answers control_wait_expired.
func (s *Server) selectOption(c *gin.Context, r store.LineRun, req controlRequest) error {
	ctx := c.Request.Context()
	if req.TransitionID == nil || req.Option == nil || *req.TransitionID == "" || *req.Option == "" {
		return invalid(workflows.CodeControlMissingID, "select needs transition_id and option", "body")
	}
	if run.LineRun.Terminal(r.Status) {
		return endedSelect(r, *req.TransitionID)
	}
	sel, ok := s.cfg.Runs.(Selector)
	if s.cfg.Runs == nil || !ok {
		return errNoEngine()
	}
	in := workflows.SelectInput{TransitionID: *req.TransitionID, Option: *req.Option, Actor: c.GetString(actorKey)}
	if req.Reason != nil {
		in.Reason = *req.Reason
	}
	resumed, err := sel.SelectLineRun(ctx, r.ID, in)
	var ae *temporal.ApplicationError
	var nf *serviceerror.NotFound
	switch {
	case errors.As(err, &ae) && selectCodes[ae.Type()]:
		loc := []any{"body"}
		if l, ok := selectLocs[ae.Type()]; ok {
			loc = append(loc, l)
		}
		return invalid(ae.Type(), ae.Message(), loc...)
	case errors.As(err, &nf):
		// The manager ended meanwhile: answer as for an ended run.
		again, gerr := s.store.GetLineRun(ctx, r.ID)
		if gerr != nil {
			return gerr
		}
		if run.LineRun.Terminal(again.Status) {
			return endedSelect(again, *req.TransitionID)
		}
		return httpError(http.StatusBadGateway, CodeBadGateway, "the workflow engine did not take the select of %s", r.ID)
	case err != nil:
		return httpError(http.StatusBadGateway, CodeBadGateway, "the workflow engine did not take the select of %s", r.ID)
	}
	c.JSON(http.StatusAccepted, lineRunResponse(resumed))
	return nil
}

// endedSelect is the refusal of a select for a run that has ended.
func endedSelect(r store.LineRun, transitionID string) error {
	if f := r.Failure; f != nil && f.Code != nil && *f.Code == "routing_wait_expired" {
		return invalid(workflows.CodeControlWaitExpired, fmt.Sprintf("line run %s stopped waiting for a selection: %s", r.ID, deref(f.ErrorMessage)), "body", "transition_id")
	}
	return invalid(workflows.CodeControlTargetInvalid, fmt.Sprintf("line run %s has ended (%s) and waits for no selection", r.ID, r.Status), "body", "transition_id")
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
