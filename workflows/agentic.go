package workflows

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/linefactory/linefactory/activities"
	"github.com/linefactory/linefactory/manifests"
	"github.com/linefactory/linefactory/manifests/run"
)

// SelectUpdate is the Temporal Update a person answers a waiting line run
// with (POST /factory/line-runs/{id}/control, action select). Its validator
// refuses a bad select before it reaches the history; the refusal's
// ApplicationError type is the failure code (control_missing_id,
// control_target_invalid, control_wait_unknown_selection,
// control_wait_expired).
const SelectUpdate = "select"

// SelectInput picks an option of the agentic transition a run waits on.
type SelectInput struct {
	TransitionID string
	Option       string
	// Actor is the name of the token that selected; Reason is optional.
	Actor  string
	Reason string
}

// Failure codes of a refused select.
const (
	CodeControlMissingID        = "control_missing_id"
	CodeControlTargetInvalid    = "control_target_invalid"
	CodeControlUnknownOption    = "control_wait_unknown_selection"
	CodeControlWaitExpired      = "control_wait_expired"
	CodeControlPayloadInvalid   = "control_payload_invalid"
	codeAmbiguousAgentic        = "ambiguous_agentic_transition"
	codeRoutingWaitExpired      = "routing_wait_expired"
	decidedByRouter             = "router"
	statusSearchAttributeName   = "LinefactoryStatus"
	statusMemoKey               = "status"
	routeActivityStartToClose   = 10 * time.Minute
	routeActivityMaxAttempts    = 3
	minimumActivityStartToClose = time.Second
)

// StatusSearchAttribute is the Keyword search attribute a line run's
// manager keeps its status in (running, waiting) when the cluster has it
// registered: an operator filters waiting runs in the Web UI with
// `LinefactoryStatus = "waiting"`. The status is also in the memo, which
// needs no registration.
var StatusSearchAttribute = temporal.NewSearchAttributeKeyKeyword(statusSearchAttributeName)

// agentWait is a manager turn's wait for a select, shared by the wait and
// the select Update's validator and handler.
type agentWait struct {
	waiting *run.Wait
	expired map[string]bool // transitions whose wait expired
	choice  *SelectInput
	resumed LineRecord // the record once the run runs again
	over    bool       // the wait ended without a select
	// onRecord receives the record after each routing write (the state
	// query shows it).
	onRecord func(LineRecord)
	// summary is the record as routing last wrote it.
	summary *LineRecord
}

func (w *agentWait) recorded(r LineRecord) {
	if w.onRecord != nil && r.head().ID != "" {
		w.onRecord(r)
	}
}

// registerSelect installs the select Update of this turn; summary is the
// record the handler answers with when the run did not resume.
func registerSelect(ctx workflow.Context, summary *LineRecord) *agentWait {
	w := &agentWait{expired: map[string]bool{}, summary: summary}
	_ = workflow.SetUpdateHandlerWithOptions(ctx, SelectUpdate,
		func(ctx workflow.Context, in SelectInput) (LineRecord, error) {
			w.choice = &in
			if err := workflow.Await(ctx, func() bool { return w.resumed != nil || w.over }); err != nil {
				return nil, err
			}
			if w.resumed != nil {
				return w.resumed, nil
			}
			return *summary, nil
		},
		workflow.UpdateHandlerOptions{Validator: func(in SelectInput) error { return w.validate(in) }})
	return w
}

// validate refuses a select the run cannot take now. It reads state only.
func (w *agentWait) validate(in SelectInput) error {
	refuse := func(code, format string, args ...any) error {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf(format, args...), code, nil)
	}
	switch {
	case in.TransitionID == "" || in.Option == "":
		return refuse(CodeControlMissingID, "select needs transition_id and option")
	case w.expired[in.TransitionID]:
		return refuse(CodeControlWaitExpired, "the wait of transition %s has expired", in.TransitionID)
	case w.waiting == nil || w.choice != nil:
		return refuse(CodeControlTargetInvalid, "the line run is not waiting for a selection")
	case w.waiting.TransitionID != in.TransitionID:
		return refuse(CodeControlTargetInvalid, "the line run waits on transition %s, not %s", w.waiting.TransitionID, in.TransitionID)
	}
	names := make([]string, len(w.waiting.Options))
	for i, o := range w.waiting.Options {
		if o.Name == in.Option {
			return nil
		}
		names[i] = o.Name
	}
	return refuse(CodeControlUnknownOption, "%q is not an option of transition %s (options: %s)", in.Option, in.TransitionID, strings.Join(names, ", "))
}

// needsInstructions tells whether a line binds routing instructions to
// knowledge, which is resolved when its run starts.
func needsInstructions(m manifests.LineManifest) bool {
	if m.Agent != nil && m.Agent.Instructions != nil && m.Agent.Instructions.Type == manifests.BindingKnowledge {
		return true
	}
	for _, t := range m.Transitions {
		if t.Type == manifests.TransitionAgentic && t.Instructions != nil && t.Instructions.Type == manifests.BindingKnowledge {
			return true
		}
	}
	return false
}

// resolveInstructions records, at the start of a run, the knowledge
// versions its routing instructions use.
func resolveInstructions(ctx workflow.Context, in LineRunInput, summary *LineRecord) (*run.Failure, error) {
	err := workflow.ExecuteLocalActivity(ctx, a.ResolveInstructions, activities.ResolveInstructionsInput{RunID: in.RunID, Manifest: in.Manifest}).Get(ctx, summary)
	var ae *temporal.ApplicationError
	if errors.As(err, &ae) && ae.Type() == activities.ErrKnowledgeMissing {
		return failure(run.LineStateInvalid, "routing instructions: "+ae.Error()), nil
	}
	return nil, err
}

// routeRequest is what the router is asked about transition t after a
// visit: the visited stage, the earlier stages' latest results and the
// options.
func routeRequest(in LineRunInput, st *LineState, t manifests.Transition, visit activities.StageVisit, options []run.WaitOption) activities.RouteInput {
	iteration := st.Transitions[t.ID] + 1
	req := activities.RouteInput{RunID: in.RunID, LineName: in.LineName, TransitionID: t.ID, Label: t.Label, Iteration: iteration,
		Instructions: t.Instructions, Trigger: in.Trigger, Options: options,
		Stage: activities.RouteStage{Stage: visit.Stage, Status: string(visit.Status), Iteration: visit.Iteration, Outputs: visit.Outputs, JobRunID: visit.JobRunID}}
	if in.Manifest.Agent != nil {
		req.Agent = in.Manifest.Agent.Instructions
	}
	stages := make([]string, 0, len(st.Results))
	//workflowcheck:ignore (keys are sorted)
	for id := range st.Results {
		stages = append(stages, id)
	}
	sort.Strings(stages)
	for _, id := range stages {
		if r := st.Results[id]; id != visit.Stage {
			req.Earlier = append(req.Earlier, activities.RouteStage{Stage: id, Status: r.Status, Iteration: r.Iteration, Outputs: r.Outputs, JobRunID: r.JobRunID})
		}
	}
	return req
}

// askRouter runs the RouteAgentic activity, within the line's deadline.
func askRouter(ctx workflow.Context, st *LineState, req activities.RouteInput) (activities.RouteResult, error) {
	startToClose := routeActivityStartToClose
	if st.Deadline != nil {
		startToClose = max(min(startToClose, st.Deadline.Sub(workflow.Now(ctx))), minimumActivityStartToClose)
	}
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: startToClose,
		RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: routeActivityMaxAttempts, NonRetryableErrorTypes: []string{activities.ErrKnowledgeMissing}}})
	var res activities.RouteResult
	err := workflow.ExecuteActivity(actx, a.RouteAgentic, req).Get(actx, &res)
	return res, err
}

// decideAgentic picks the option of agentic transition t after the visit:
// the router decides when one is configured and reachable, else the run
// waits for a person's select (until the wait times out, the line times
// out or the run is stopped). It returns the hop to take or the failure.
func (w *agentWait) decideAgentic(ctx, book workflow.Context, in LineRunInput, st *LineState, t manifests.Transition,
	visit activities.StageVisit, summary *LineRecord) (*hop, *run.Failure, error) {
	// A Temporal run holds several turns: each decision starts afresh.
	w.waiting, w.choice, w.resumed, w.over = nil, nil, nil, false
	defer func() { w.over = true }()
	options := make([]run.WaitOption, len(t.Options))
	for i, o := range t.Options {
		options[i] = run.WaitOption{Name: o.Name, To: o.To, Label: optString(o.Label)}
	}
	res, err := askRouter(ctx, st, routeRequest(in, st, t, visit, options))
	if ctx.Err() != nil {
		return nil, failure(run.UserCancelled, "the line run was stopped"), nil
	}
	if err != nil {
		res = activities.RouteResult{RouterError: "the router could not be asked: " + err.Error(), WaitTimeout: activities.DefaultRouterWaitTimeout}
	} else if rec := LineRecord(res.LineRun); rec.head().ID != "" {
		*summary = rec
		st.CostCents = rec.head().TotalCostCents
		w.recorded(rec)
	}
	m := in.Manifest
	if res.Decided && m.Limits != nil && m.Limits.BudgetUSD != nil && st.CostCents > m.Limits.BudgetUSD.Cents {
		return nil, failure(run.BudgetExceeded, fmt.Sprintf("rated cost %d cents is over the budget of %s USD", st.CostCents, m.Limits.BudgetUSD)), nil
	}
	if res.Decided && res.Ambiguous != "" {
		return nil, failure(run.AmbiguousAgenticTransition, res.Ambiguous), nil
	}
	if res.Decided {
		now := workflow.Now(ctx)
		return w.take(in, st, t, res.Option, run.Decision{Reason: optString(res.Reason), DecidedBy: optString(decidedByRouter), DecidedAt: &now})
	}
	return w.personDecides(ctx, book, in, st, t, visit, options, res, summary)
}

// personDecides waits for a person to select an option of transition t
// (the router did not decide), until the wait or the line times out.
func (w *agentWait) personDecides(ctx, book workflow.Context, in LineRunInput, st *LineState, t manifests.Transition,
	visit activities.StageVisit, options []run.WaitOption, res activities.RouteResult, summary *LineRecord) (*hop, *run.Failure, error) {
	m := in.Manifest
	now := workflow.Now(ctx)
	wait := run.Wait{TransitionID: t.ID, From: visit.Stage, Options: options, Since: now, ExpiresAt: now.Add(res.WaitTimeout),
		RouterError: optString(res.RouterError)}
	w.waiting = &wait
	if err := workflow.ExecuteLocalActivity(book, a.MarkWaiting, activities.MarkWaitingInput{RunID: in.RunID, Waiting: wait}).Get(book, summary); err != nil {
		return nil, nil, err
	}
	w.recorded(*summary)
	publishStatus(ctx, run.Waiting)
	limit, lineTimeout := res.WaitTimeout, false
	if st.Deadline != nil {
		if left := st.Deadline.Sub(now); left < limit {
			limit, lineTimeout = max(left, time.Millisecond), true
		}
	}
	chosen, err := workflow.AwaitWithTimeout(ctx, limit, func() bool { return w.choice != nil })
	if err != nil || ctx.Err() != nil {
		return nil, failure(run.UserCancelled, "the line run was stopped"), nil
	}
	if !chosen {
		w.waiting = nil
		if lineTimeout {
			return nil, failure(run.LineTimeout, fmt.Sprintf("the line ran past its timeout %s while waiting for a selection", m.Limits.Timeout)), nil
		}
		w.expired[t.ID] = true
		msg := fmt.Sprintf("nobody selected an option of transition %s within %s", t.ID, res.WaitTimeout)
		if res.RouterError != "" {
			msg += " (" + res.RouterError + ")"
		}
		return nil, failure(run.RoutingWaitExpired, msg), nil
	}
	choice := *w.choice
	w.waiting = nil
	if err := workflow.ExecuteLocalActivity(book, a.ResumeLineRun, activities.ResumeLineRunInput{RunID: in.RunID}).Get(book, summary); err != nil {
		return nil, nil, err
	}
	w.resumed = *summary
	w.recorded(w.resumed)
	publishStatus(ctx, run.Running)
	// The handler answers the select with the record as resumed before the
	// run moves on.
	if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
		return nil, failure(run.UserCancelled, "the line run was stopped"), nil
	}
	at := workflow.Now(ctx)
	reason := choice.Reason
	if reason == "" {
		reason = "selected by " + choice.Actor
	}
	return w.take(in, st, t, choice.Option, run.Decision{Reason: &reason, DecidedBy: optString(choice.Actor), DecidedAt: &at,
		RouterError: optString(res.RouterError)})
}

// take is the hop of option name of t, its params bound like a
// conditional transition's.
func (w *agentWait) take(in LineRunInput, st *LineState, t manifests.Transition, name string, d run.Decision) (*hop, *run.Failure, error) {
	for _, o := range t.Options {
		if o.Name != name {
			continue
		}
		params, err := bindParams(o.Params, in, st, in.Jobs[o.To].Manifest)
		if err != nil {
			return nil, failure(run.TransitionParamsInvalid, fmt.Sprintf("transition %s option %s: %v", t.ID, o.Name, err)), nil
		}
		return &hop{transition: t.ID, stage: o.To, params: params, option: o.Name, decision: d}, nil, nil
	}
	return nil, failure(run.AmbiguousAgenticTransition, fmt.Sprintf("%q is not an option of transition %s", name, t.ID)), nil
}

// publishStatus puts the run's status in the manager's memo, and in its
// search attribute when the run was started with it (the cluster has it).
func publishStatus(ctx workflow.Context, status run.Status) {
	_ = workflow.UpsertMemo(ctx, map[string]any{statusMemoKey: string(status)})
	if workflow.GetTypedSearchAttributes(ctx).ContainsKey(StatusSearchAttribute) {
		_ = workflow.UpsertTypedSearchAttributes(ctx, StatusSearchAttribute.ValueSet(string(status)))
	}
}

// optString is s, or nil when empty.
func optString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
