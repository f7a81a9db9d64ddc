package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/openai/openai-go"
	"github.com/openai/openai-go/option"
	"github.com/openai/openai-go/shared"
	"go.temporal.io/sdk/temporal"

	"github.com/linefactory/linefactory/manifests"
	"github.com/linefactory/linefactory/manifests/agentconf"
	"github.com/linefactory/linefactory/manifests/inference"
	"github.com/linefactory/linefactory/manifests/run"
	"github.com/linefactory/linefactory/store"
)

// Router defaults.
const (
	DefaultRouterTimeout     = 60 * time.Second
	DefaultRouterWaitTimeout = 24 * time.Hour
	// routerRetries is how often a failed router call is retried.
	routerRetries = 2
)

// KnowledgeReader reads knowledge items for instructions.
type KnowledgeReader interface {
	GetKnowledge(ctx context.Context, identifier string) (store.KnowledgeItem, store.KnowledgeVersion, error)
	GetKnowledgeVersion(ctx context.Context, identifier string, n int) (store.KnowledgeVersion, error)
}

// Uses of knowledge bound as routing instructions.
const useAgentInstructions = "agent.instructions"

func transitionUse(id string) string { return "transitions." + id + ".instructions" }

// ResolveInstructionsInput resolves a line's routing instructions at the
// start of its run.
type ResolveInstructionsInput struct {
	RunID    string
	Manifest manifests.LineManifest
}

// ErrKnowledgeMissing: a knowledge binding names an item that does not exist.
const ErrKnowledgeMissing = "KnowledgeMissing"

// ResolveInstructions resolves every knowledge binding of the line's
// agent.instructions and of its agentic transitions' instructions to the
// item's latest version and records them as the run's knowledge_versions,
// and returns the line run record as JSON. A missing item is a
// non-retryable error of type ErrKnowledgeMissing.
func (a *Activities) ResolveInstructions(ctx context.Context, in ResolveInstructionsInput) (json.RawMessage, error) {
	type bound struct {
		use string
		b   *manifests.Binding
	}
	var all []bound
	if in.Manifest.Agent != nil {
		all = append(all, bound{useAgentInstructions, in.Manifest.Agent.Instructions})
	}
	for _, t := range in.Manifest.Transitions {
		if t.Type == manifests.TransitionAgentic {
			all = append(all, bound{transitionUse(t.ID), t.Instructions})
		}
	}
	var refs []store.InstructionsVersion
	for _, b := range all {
		if b.b == nil || b.b.Type != manifests.BindingKnowledge {
			continue
		}
		if a.Knowledge == nil {
			return nil, errors.New("no knowledge store configured")
		}
		_, v, err := a.Knowledge.GetKnowledge(ctx, b.b.Slug)
		if errors.Is(err, store.ErrNotFound) {
			return nil, newNonRetryable(fmt.Sprintf("%s: knowledge %q does not exist", b.use, b.b.Slug), ErrKnowledgeMissing)
		}
		if err != nil {
			return nil, err
		}
		refs = append(refs, store.InstructionsVersion{Slug: b.b.Slug, VersionID: v.ID, VersionNumber: v.VersionNumber, ContentHash: v.ContentHash, Use: b.use})
	}
	return recordJSON(a.Store.UpdateLineRun(ctx, in.RunID, func(r *store.LineRun) error {
		r.KnowledgeVersions = refs
		return nil
	}))
}

// recordJSON is a line run record as the manager gets it from an activity:
// its JSON (GET /factory/line-runs/{id}'s keys), which the state query and
// the select Update answer with. The workflows know no storage types.
func recordJSON(r store.LineRun, err error) (json.RawMessage, error) {
	if err != nil {
		return nil, err
	}
	return json.Marshal(r)
}

// RouteStage is a stage's result as the router sees it.
type RouteStage struct {
	Stage     string         `json:"stage"`
	Status    string         `json:"status"`
	Iteration int            `json:"iteration"`
	Outputs   map[string]any `json:"outputs"`
	JobRunID  string         `json:"job_run_id,omitempty"`
}

// RouteInput asks the router to pick an option of an agentic transition.
type RouteInput struct {
	RunID        string
	LineName     string
	TransitionID string
	Label        string
	// Iteration is the how-many-th decision of this transition.
	Iteration int
	// Agent and Instructions are the line's agent.instructions and the
	// transition's instructions; knowledge bindings read the versions
	// resolved at run start (Knowledge).
	Agent        *manifests.Binding
	Instructions *manifests.Binding
	Knowledge    []store.InstructionsVersion
	Stage        RouteStage
	Earlier      []RouteStage
	Trigger      map[string]any
	Options      []run.WaitOption
}

// RouteResult is the router's decision, or why a person must decide.
type RouteResult struct {
	// Decided: the router answered. Option is one of the options, unless
	// Ambiguous says what was wrong with the answer.
	Decided   bool
	Option    string
	Reason    string
	Ambiguous string
	// RouterError says why a configured router could not decide; empty
	// without a router (no model configured).
	RouterError string
	// WaitTimeout is how long a person's select is waited for.
	WaitTimeout time.Duration
	// LineRun is the record with the call's cost booked, as JSON (see
	// recordJSON); empty when the router was not called.
	LineRun json.RawMessage
}

// routeAnswer is the JSON-schema constrained answer of the router.
type routeAnswer struct {
	Option *string `json:"option"`
	Reason *string `json:"reason"`
}

// RouteAgentic asks the configured router ([router] model through
// [inference]) to pick an option: one chat-completions call (retried) with
// the instructions as the system message and the run's context as the user
// message, its answer constrained by a JSON schema. The call's tokens are
// priced into the run's inference cost. Without a router the result says
// how long to wait for a person; an unreachable router says why.
func (a *Activities) RouteAgentic(ctx context.Context, in RouteInput) (RouteResult, error) {
	inf := a.Inference
	res := RouteResult{WaitTimeout: DefaultRouterWaitTimeout}
	if inf == nil || inf.Router == nil {
		return res, nil
	}
	r := inf.Router
	if r.WaitTimeout > 0 {
		res.WaitTimeout = r.WaitTimeout
	}
	if r.Model == "" {
		return res, nil
	}
	if len(in.Knowledge) == 0 && needsKnowledge(in) {
		// The versions resolved at run start, as recorded on the run.
		rec, err := a.Store.UpdateLineRun(ctx, in.RunID, func(*store.LineRun) error { return nil })
		if err != nil {
			return RouteResult{}, err
		}
		in.Knowledge = rec.KnowledgeVersions
	}
	system, err := a.instructionsText(ctx, in)
	if err != nil {
		return RouteResult{}, err
	}
	user, err := routeContext(in)
	if err != nil {
		return RouteResult{}, err
	}
	names := make([]string, len(in.Options))
	for i, o := range in.Options {
		names[i] = o.Name
	}
	resp, err := askRouterModel(ctx, inf, system, user, names)
	call := store.RouterCall{TransitionID: in.TransitionID, Iteration: in.Iteration, Model: r.Model, At: a.now()}
	if err != nil {
		if ctx.Err() != nil {
			return RouteResult{}, ctx.Err()
		}
		res.RouterError = fmt.Sprintf("the router (%s at %s) could not be reached after %d attempts: %s", r.Model, inf.BaseURL, routerRetries+1, routerErrorText(err))
		call.Error = &res.RouterError
		res.LineRun, err = a.bookRouterCall(ctx, in.RunID, call)
		return res, err
	}
	call.InputTokens, call.OutputTokens = resp.Usage.PromptTokens, resp.Usage.CompletionTokens
	micro, priced := inf.Price(r.Model, call.InputTokens, call.OutputTokens)
	call.MicroCents, call.Unpriced = micro, !priced
	res.Decided = true
	content := ""
	if len(resp.Choices) > 0 {
		content = resp.Choices[0].Message.Content
	}
	var ans routeAnswer
	switch {
	case json.Unmarshal([]byte(content), &ans) != nil || ans.Option == nil:
		res.Ambiguous = fmt.Sprintf("the router's answer is not {\"option\", \"reason\"}: %.200q", content)
	case !contains(names, *ans.Option):
		res.Ambiguous = fmt.Sprintf("the router chose %q, which is not an option of transition %s (options: %s)", *ans.Option, in.TransitionID, strings.Join(names, ", "))
	}
	if ans.Option != nil {
		res.Option = *ans.Option
		call.Option = ans.Option
	}
	if ans.Reason != nil {
		res.Reason = *ans.Reason
	}
	res.LineRun, err = a.bookRouterCall(ctx, in.RunID, call)
	return res, err
}

// routerErrorText is an error of the router's client without its request
// dump.
func routerErrorText(err error) string {
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		return fmt.Sprintf("HTTP %d", apiErr.StatusCode)
	}
	return err.Error()
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// bookRouterCall records a router call on the line run (replacing the
// record of an earlier attempt of the same decision) and prices it in.
func (a *Activities) bookRouterCall(ctx context.Context, runID string, call store.RouterCall) (json.RawMessage, error) {
	return recordJSON(a.Store.UpdateLineRun(ctx, runID, func(r *store.LineRun) error {
		replaced := false
		for i, c := range r.RouterCalls {
			if c.TransitionID == call.TransitionID && c.Iteration == call.Iteration {
				r.RouterCalls[i], replaced = call, true
			}
		}
		if !replaced {
			r.RouterCalls = append(r.RouterCalls, call)
		}
		var micro int64
		for _, c := range r.RouterCalls {
			micro += c.MicroCents
		}
		r.RouterCostCents = agentconf.CentsRoundedUp(micro)
		now := a.now()
		r.CostRatedAt = &now
		sumCosts(r)
		return nil
	}))
}

// instructionsText is the system message: the line's agent instructions,
// then the transition's.
func (a *Activities) instructionsText(ctx context.Context, in RouteInput) (string, error) {
	var parts []string
	parts = append(parts, "You route a run of the line "+in.LineName+": pick exactly one of the options of the transition "+
		in.TransitionID+" and say why. Answer with a JSON object {\"option\": <option name>, \"reason\": <text>}.")
	for _, b := range []struct {
		use string
		b   *manifests.Binding
	}{{useAgentInstructions, in.Agent}, {transitionUse(in.TransitionID), in.Instructions}} {
		text, err := a.bindingText(ctx, b.use, b.b, in.Knowledge)
		if err != nil {
			return "", err
		}
		if text != "" {
			parts = append(parts, text)
		}
	}
	return strings.Join(parts, "\n\n"), nil
}

// bindingText is the text of an instructions binding: a literal's value
// (JSON unless a string), or the knowledge version resolved at run start.
func (a *Activities) bindingText(ctx context.Context, use string, b *manifests.Binding, refs []store.InstructionsVersion) (string, error) {
	if b == nil {
		return "", nil
	}
	switch b.Type {
	case manifests.BindingLiteral:
		if s, ok := b.Value.(string); ok {
			return s, nil
		}
		out, err := json.Marshal(b.Value)
		return string(out), err
	case manifests.BindingKnowledge:
		for _, r := range refs {
			if r.Use == use && r.Slug == b.Slug {
				if a.Knowledge == nil {
					return "", errors.New("no knowledge store configured")
				}
				v, err := a.Knowledge.GetKnowledgeVersion(ctx, r.Slug, r.VersionNumber)
				if err != nil {
					return "", fmt.Errorf("%s: %w", use, err)
				}
				return v.Body, nil
			}
		}
		return "", newNonRetryable(fmt.Sprintf("%s: knowledge %q was not resolved at run start", use, b.Slug), ErrKnowledgeMissing)
	}
	return "", nil
}

// askRouterModel asks the router's model to choose one of the options
// names, with the instructions as the system message and the run's context
// as the user message; the answer is JSON {"option", "reason"}.
func askRouterModel(ctx context.Context, inf *inference.Config, system, user string, names []string) (*openai.ChatCompletion, error) {
	r := inf.Router
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = DefaultRouterTimeout
	}
	client := openai.NewClient(option.WithBaseURL(inf.BaseURL), option.WithAPIKey(inf.APIKey),
		option.WithMaxRetries(routerRetries), option.WithRequestTimeout(timeout))
	schema := map[string]any{
		"type": "object", "additionalProperties": false, "required": []string{"option", "reason"},
		"properties": map[string]any{
			"option": map[string]any{"type": "string", "enum": names, "description": "the name of the chosen option"},
			"reason": map[string]any{"type": "string", "description": "why this option, in a sentence or two"},
		},
	}
	return client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:    r.Model,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage(system), openai.UserMessage(user)},
		ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
			JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "route", Strict: openai.Bool(true), Schema: schema},
		}},
	})
}

// routeContext is the user message: a JSON document of the stage just
// visited, the earlier stages' results, the trigger summary and the options.
func routeContext(in RouteInput) (string, error) {
	earlier := append([]RouteStage{}, in.Earlier...)
	sort.Slice(earlier, func(i, j int) bool { return earlier[i].Stage < earlier[j].Stage })
	trigger := map[string]any{}
	for k, v := range in.Trigger {
		if k != "body" { // the raw webhook body stays out
			trigger[k] = v
		}
	}
	options := make([]map[string]any, len(in.Options))
	for i, o := range in.Options {
		options[i] = map[string]any{"name": o.Name, "label": o.Label, "to": o.To}
	}
	doc := map[string]any{
		"line":       in.LineName,
		"transition": map[string]any{"id": in.TransitionID, "label": in.Label, "from": in.Stage.Stage},
		"stage":      in.Stage,
		"earlier":    earlier,
		"trigger":    trigger,
		"options":    options,
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	return string(out), err
}

// MarkWaitingInput puts a line run into waiting for a person's select.
type MarkWaitingInput struct {
	RunID   string
	Waiting run.Wait
}

// MarkWaiting sets a line run waiting (status and what it waits for) and
// returns the record as JSON.
func (a *Activities) MarkWaiting(ctx context.Context, in MarkWaitingInput) (json.RawMessage, error) {
	return recordJSON(a.Store.UpdateLineRun(ctx, in.RunID, func(r *store.LineRun) error {
		if run.LineRun.Terminal(r.Status) {
			return nil
		}
		w := in.Waiting
		w.Since, w.ExpiresAt = w.Since.UTC(), w.ExpiresAt.UTC()
		r.Status, r.Waiting = run.Waiting, &w
		return nil
	}))
}

// ResumeLineRunInput ends a line run's wait.
type ResumeLineRunInput struct {
	RunID string
}

// ResumeLineRun sets a waiting line run back to running and returns the
// record as JSON.
func (a *Activities) ResumeLineRun(ctx context.Context, in ResumeLineRunInput) (json.RawMessage, error) {
	return recordJSON(a.Store.UpdateLineRun(ctx, in.RunID, func(r *store.LineRun) error {
		if r.Status == run.Waiting {
			r.Status = run.Running
		}
		r.Waiting = nil
		return nil
	}))
}

func newNonRetryable(msg, typ string) error {
	return temporal.NewNonRetryableApplicationError(msg, typ, nil)
}

// optString is s, or nil when empty.
func optString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func needsKnowledge(in RouteInput) bool {
	for _, b := range []*manifests.Binding{in.Agent, in.Instructions} {
		if b != nil && b.Type == manifests.BindingKnowledge {
			return true
		}
	}
	return false
}
