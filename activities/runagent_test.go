package activities

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/linefactory/linefactory/activities/sandbox"
	"github.com/linefactory/linefactory/manifests"
	"github.com/linefactory/linefactory/manifests/agentconf"
	"github.com/linefactory/linefactory/manifests/inference"
	"github.com/linefactory/linefactory/manifests/manifesttest"
	"github.com/linefactory/linefactory/manifests/run"
	"github.com/linefactory/linefactory/store"
)

// agentStoreFake is an in-memory AgentStore.
type agentStoreFake struct {
	mu        sync.Mutex
	knowledge map[string][]store.KnowledgeVersion // by slug, version n at [n-1]
	sessions  map[string]string
}

func (f *agentStoreFake) GetKnowledge(_ context.Context, slug string) (store.KnowledgeItem, store.KnowledgeVersion, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	vs := f.knowledge[slug]
	if len(vs) == 0 {
		return store.KnowledgeItem{}, store.KnowledgeVersion{}, store.ErrNotFound
	}
	return store.KnowledgeItem{Identifier: slug}, vs[len(vs)-1], nil
}

func (f *agentStoreFake) GetKnowledgeVersion(_ context.Context, slug string, n int) (store.KnowledgeVersion, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	vs := f.knowledge[slug]
	if n < 1 || n > len(vs) {
		return store.KnowledgeVersion{}, store.ErrNotFound
	}
	return vs[n-1], nil
}

func (f *agentStoreFake) add(slug, body string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := len(f.knowledge[slug]) + 1
	f.knowledge[slug] = append(f.knowledge[slug], store.KnowledgeVersion{ID: slug + "-v" + string(rune('0'+n)), Identifier: slug, VersionNumber: n,
		Format: "markdown", Body: body, ContentHash: "sha256:" + slug + string(rune('0'+n))})
}

func (f *agentStoreFake) GetSandboxSession(_ context.Context, sb, name string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id, ok := f.sessions[sb+"/"+name]
	if !ok {
		return "", store.ErrNotFound
	}
	return id, nil
}

func (f *agentStoreFake) PutSandboxSession(_ context.Context, sb, name, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sessions[sb+"/"+name] = id
	return nil
}

var agentJobManifest = manifesttest.Job("agent-session")

func agentFixture(t *testing.T) (*Activities, *runStore, *agentStoreFake, manifests.JobManifest) {
	t.Helper()
	script, err := os.ReadFile("../cmd/factoryd/testdata/fake-agent.sh")
	if err != nil {
		t.Fatal(err)
	}
	// The script is given inline: an isolated sandbox sees only system
	// directories, its workspace and its /tmp.
	inline := `"sh", "-c", '''` + string(script) + `''', "fake-agent"`
	cfg, err := agentconf.Parse([]byte(`
[harnesses.agent_a]
command = [`+inline+`, "--prompt-file={{prompt_file}}", "--model={{model}}", "--effort={{effort}}", "--mcp={{mcp_config}}"]
resume_command = [`+inline+`, "--resume={{session_id}}", "--prompt-file={{prompt_file}}", "--model={{model}}"]
default_model = "big"
[[harnesses.agent_a.models]]
name = "big"
input_cents_per_mtok = 100
output_cents_per_mtok = 1000
[[harnesses.agent_a.models]]
name = "cheap"
[harnesses.custom]
env = { CUSTOM_ENV = "yes" }
`), "test.toml")
	if err != nil {
		t.Fatal(err)
	}
	drv, err := sandbox.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(drv.Close) // its idle sandboxes' cgroups go with it
	if _, err := drv.Acquire(context.Background(), sandbox.Spec{Mode: "ensure", Name: "box", Vcpus: 1, MemoryMB: 512}); err != nil {
		t.Fatal(err)
	}
	st := &runStore{runs: map[string]store.JobRun{"jr_1": {ID: "jr_1", Status: run.Queued}}}
	ks := &agentStoreFake{knowledge: map[string][]store.KnowledgeVersion{}, sessions: map[string]string{}}
	ks.add("guide", "GUIDE-V1")
	ks.add("resume", "Continue {{ticket}} {{other}}")
	a := &Activities{Store: st, AgentStore: ks, Sandboxes: drv, Agents: cfg, OutputDir: t.TempDir()}
	m, err := manifests.ParseJob([]byte(agentJobManifest), manifests.FormatTOML)
	if err != nil {
		t.Fatal(err)
	}
	if ps := manifests.ValidateJob(m); ps != nil {
		t.Fatal(ps)
	}
	manifests.NormalizeJob(m)
	return a, st, ks, *m
}

func stepInput(m manifests.JobManifest, runID string, j int) RunStepInput {
	t := m.Run.Tasks[0]
	name := manifests.StepName(t, j)
	return RunStepInput{RunID: runID, Task: t.Name, Step: name, StepIndex: j, Action: t.Steps[j], Sandbox: "box",
		Params: map[string]any{"ticket": "T-1", "run_id": runID}, Claimed: manifests.Claims(&m)[t.Name][name], OutputSpecs: m.Outputs, TimeoutSeconds: 60}
}

func timelineEntry(r store.JobRun, step string) store.StepTimelineEntry {
	for _, e := range r.StepTimeline {
		if e.Name == step {
			return e
		}
	}
	return store.StepTimelineEntry{}
}

func TestRunAgentSessionsKnowledgeCostsArtifacts(t *testing.T) {
	a, st, ks, m := agentFixture(t)
	ctx := context.Background()
	if err := a.StartRun(ctx, StartRunInput{RunID: "jr_1", Manifest: m}); err != nil {
		t.Fatal(err)
	}
	kv := st.runs["jr_1"].KnowledgeVersions
	if len(kv) != 2 || kv[0].Slug != "guide" || kv[0].VersionNumber != 1 || kv[0].ContentHash != "sha256:guide1" || kv[1].Slug != "resume" {
		t.Fatalf("knowledge versions %+v", kv)
	}
	// A deploy after the start changes nothing for this run.
	ks.add("guide", "GUIDE-V2")

	res, err := a.RunStep(ctx, stepInput(m, "jr_1", 0))
	if err != nil || res.Status != run.Succeeded {
		t.Fatalf("first: %+v %v", res, err)
	}
	summary := res.Outputs["summary"].(string)
	for _, want := range []string{"prompt=Fix T-1;", "knowledge=GUIDE-V1;", "mcp=http://127.0.0.1:9/mcp", "resume=;", "model=big;", "harness=agent_a"} {
		if !strings.Contains(summary, want) {
			t.Errorf("summary %q lacks %q", summary, want)
		}
	}
	first := timelineEntry(st.runs["jr_1"], "first")
	if first.AgentSessionID == nil || *first.AgentSessionID != "sess-jr_1-first" {
		t.Fatalf("first session id %v", first.AgentSessionID)
	}
	if first.InferenceCostCents != 200 || len(first.Usage) != 1 || first.Usage[0].Model != "big" || first.Usage[0].InputTokens != 1000000 {
		t.Errorf("first cost %d usage %+v", first.InferenceCostCents, first.Usage)
	}

	res, err = a.RunStep(ctx, stepInput(m, "jr_1", 1))
	if err != nil || res.Status != run.Succeeded {
		t.Fatalf("second: %+v %v", res, err)
	}
	again := res.Outputs["again"].(string)
	for _, want := range []string{"prompt=Continue T-1 {{other}};", "resume=sess-jr_1-first;", "model=cheap;"} {
		if !strings.Contains(again, want) {
			t.Errorf("again %q lacks %q", again, want)
		}
	}
	second := timelineEntry(st.runs["jr_1"], "second")
	if second.AgentSessionID == nil || *second.AgentSessionID != "sess-jr_1-first" {
		t.Errorf("second session id %v", second.AgentSessionID)
	}
	if second.InferenceCostCents != 0 || second.ErrorDetails["unpriced_models"] == nil {
		t.Errorf("unpriced model: cost %d details %v", second.InferenceCostCents, second.ErrorDetails)
	}

	res, err = a.RunStep(ctx, stepInput(m, "jr_1", 2))
	if err != nil || res.Status != run.Succeeded || res.Outputs["note"] != "n-T-1" {
		t.Fatalf("exec mode: %+v %v", res, err)
	}
	sb, _ := a.Sandboxes.Get(ctx, "box")
	if env, _ := os.ReadFile(filepath.Join(sb.Root, "env.txt")); strings.TrimSpace(string(env)) != "custom tool yes" {
		t.Errorf("exec mode env: %q", env)
	}

	fin, err := a.FinishRun(ctx, FinishRunInput{RunID: "jr_1", Manifest: m, Outcome: run.Outcome{Status: run.Succeeded},
		Writes: []manifests.OutputWrite{{Task: "t", Step: "first", Succeeded: true, Values: map[string]any{"summary": "s"}},
			{Task: "t", Step: "second", StepIndex: 1, Succeeded: true, Values: map[string]any{"again": "a"}},
			{Task: "t", Step: "tool", StepIndex: 2, Succeeded: true, Values: map[string]any{"note": "n"}}}})
	if err != nil || fin.Status != run.Succeeded {
		t.Fatalf("finish: %+v %v", fin, err)
	}
	r := st.runs["jr_1"]
	if r.InferenceCostCents != 200 || r.TotalCostCents != r.ComputeCostCents+200 {
		t.Errorf("run costs: inference %d compute %d total %d", r.InferenceCostCents, r.ComputeCostCents, r.TotalCostCents)
	}
	if len(r.ArtifactRefs) != 2 || r.ArtifactRefs[0]["external_ref"].(map[string]any)["url"] != "https://example.com/jr_1/first" {
		t.Errorf("artifacts %v", r.ArtifactRefs)
	}

	// A later run in the same sandbox resumes the named session.
	st.runs["jr_2"] = store.JobRun{ID: "jr_2", Status: run.Queued}
	if err := a.StartRun(ctx, StartRunInput{RunID: "jr_2", Manifest: m}); err != nil {
		t.Fatal(err)
	}
	if kv := st.runs["jr_2"].KnowledgeVersions; kv[0].VersionNumber != 2 {
		t.Errorf("second run knowledge %+v, want guide version 2", kv)
	}
	res, err = a.RunStep(ctx, stepInput(m, "jr_2", 0))
	if err != nil || res.Status != run.Succeeded || !strings.Contains(res.Outputs["summary"].(string), "resume=sess-jr_1-first;") ||
		!strings.Contains(res.Outputs["summary"].(string), "knowledge=GUIDE-V2;") {
		t.Fatalf("second run first step: %+v %v", res, err)
	}
}

func TestRunAgentFailures(t *testing.T) {
	a, st, _, m := agentFixture(t)
	ctx := context.Background()
	if err := a.StartRun(ctx, StartRunInput{RunID: "jr_1", Manifest: m}); err != nil {
		t.Fatal(err)
	}
	step := func(ra *manifests.RunAgent, claimed []string) RunStepResult {
		t.Helper()
		in := stepInput(m, "jr_1", 0)
		in.Action = manifests.Step{Name: "first", RunAgent: ra}
		in.Claimed = claimed
		res, err := a.RunStep(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	lit := func(s string) *manifests.Binding { return &manifests.Binding{Type: "literal", Value: s} }
	cases := []struct {
		name      string
		ra        *manifests.RunAgent
		claimed   []string
		code      string
		class     run.FailureClass
		msgSubstr string
	}{
		{"harness exits non-zero", &manifests.RunAgent{Mode: "session", Harness: "agent_a", Prompt: lit("FAIL")}, []string{"summary"}, run.CodeAgentFailed, "agent", "exited with code 7"},
		{"no output object", &manifests.RunAgent{Mode: "session", Harness: "agent_a", Command: []string{"true"}}, []string{"summary"}, run.CodeOutputInvalid, "contract", "wrote no output object"},
		{"malformed output", &manifests.RunAgent{Mode: "session", Harness: "agent_a", Command: []string{"sh", "-c", "echo '[1]' > $SVC_OUTPUT"}}, []string{"summary"}, run.CodeOutputInvalid, "contract", "not one JSON object"},
		{"wrong type", &manifests.RunAgent{Mode: "session", Harness: "agent_a", Command: []string{"sh", "-c", "echo '{\"summary\": 3}' > $SVC_OUTPUT"}}, []string{"summary"}, run.CodeOutputInvalid, "contract", "summary"},
		{"unclaimed key", &manifests.RunAgent{Mode: "session", Harness: "agent_a", Command: []string{"sh", "-c", "echo '{\"summary\": \"s\", \"note\": \"n\"}' > $SVC_OUTPUT"}}, []string{"summary"}, run.CodeOutputInvalid, "contract", "note"},
		{"harness not configured", &manifests.RunAgent{Mode: "session", Harness: "agent_c"}, nil, run.CodeHarnessNotConfigured, "config", "agent_c"},
		{"bad artifact", &manifests.RunAgent{Mode: "exec", Harness: "custom", Command: []string{"sh", "-c", `echo '{"type":"m","provider":"chat_tool","external_ref":{"provider":"chat_tool","channel":"C"}}' > $SVC_ARTIFACTS`}}, nil, run.CodeArtifactInvalid, "contract", "line 1: external_ref.ts: is required"},
	}
	for _, tc := range cases {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			res := step(tc.ra, tc.claimed)
			if res.Status != run.Failed || res.ErrorCode != tc.code || res.FailureClass != tc.class || !strings.Contains(res.ErrorMessage, tc.msgSubstr) {
				t.Errorf("got %s %s %s %q, want failed %s %s containing %q", res.Status, res.ErrorCode, res.FailureClass, res.ErrorMessage, tc.code, tc.class, tc.msgSubstr)
			}
		})
	}
	if e := timelineEntry(st.runs["jr_1"], "first"); e.ErrorCode == nil {
		t.Errorf("timeline entry has no error code: %+v", e)
	}
}

func TestExecStepArtifacts(t *testing.T) {
	a, st, _, _ := agentFixture(t)
	in := RunStepInput{RunID: "jr_1", Task: "t", Step: "s", Sandbox: "box", TimeoutSeconds: 30,
		Action: manifests.Step{Exec: []string{`echo '{"type":"knowledge_item","provider":"svc","external_ref":{"provider":"svc","slug":"guide"}}' > $SVC_ARTIFACTS`}}}
	res, err := a.RunStep(context.Background(), in)
	if err != nil || res.Status != run.Succeeded {
		t.Fatalf("%+v %v", res, err)
	}
	refs := st.runs["jr_1"].ArtifactRefs
	if len(refs) != 1 || refs[0]["external_ref"].(map[string]any)["kind"] != "knowledge_item" {
		t.Errorf("artifact refs %v", refs)
	}
	in.Action.Exec = []string{`echo '{"type":"knowledge_item","provider":"svc","external_ref":{"provider":"svc","slug":"nope"}}' > $SVC_ARTIFACTS`}
	res, _ = a.RunStep(context.Background(), in)
	if res.ErrorCode != run.CodeArtifactInvalid || res.FailureClass != "contract" || !strings.Contains(res.ErrorMessage, `line 1: external_ref.slug: knowledge item "nope" does not exist`) {
		t.Errorf("bad svc slug: %+v", res)
	}
}

// TestRunAgentOutputPath: an agent step sees $SVC_OUTPUT in the form SPEC
// gives exec steps, /tmp/svc_output.<job_run_id>.<random>, in both modes.
func TestRunAgentOutputPath(t *testing.T) {
	a, _, _, m := agentFixture(t)
	ctx := context.Background()
	if err := a.StartRun(ctx, StartRunInput{RunID: "jr_1", Manifest: m}); err != nil {
		t.Fatal(err)
	}
	form := regexp.MustCompile(`^/tmp/svc_output\.jr_1\.[0-9a-f]+$`)
	for _, ra := range []*manifests.RunAgent{
		{Mode: "exec", Harness: "custom", Command: []string{"sh", "-c", `echo "note=$SVC_OUTPUT" >> $SVC_OUTPUT`}},
		{Mode: "session", Harness: "agent_a", Command: []string{"sh", "-c", `printf '{"note": "%s"}' "$SVC_OUTPUT" > $SVC_OUTPUT`}},
	} {
		in := stepInput(m, "jr_1", 2)
		in.Action = manifests.Step{Name: "tool", RunAgent: ra}
		res, err := a.RunStep(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != run.Succeeded || !form.MatchString(fmt.Sprint(res.Outputs["note"])) {
			t.Errorf("%s mode: %s %q, $SVC_OUTPUT was %v", ra.Mode, res.Status, res.ErrorMessage, res.Outputs["note"])
		}
	}
}

type tokenSink struct{ n int }

func (s *tokenSink) CreateInferenceToken(context.Context, store.InferenceToken) error {
	s.n++
	return nil
}

// TestRunAgentSvcInferenceUsage: a svc_inference step's cost is what the
// gateway measures; the usage the agent reports is neither priced onto its
// timeline entry nor into the run.
func TestRunAgentSvcInferenceUsage(t *testing.T) {
	a, st, _, m := agentFixture(t)
	a.Inference = &inference.Config{BaseURL: "http://127.0.0.1:9/v1", GatewayURL: "http://127.0.0.1:9/inference/v1"}
	tokens := &tokenSink{}
	a.InferenceTokens = tokens
	ctx := context.Background()
	if err := a.StartRun(ctx, StartRunInput{RunID: "jr_1", Manifest: m}); err != nil {
		t.Fatal(err)
	}
	in := stepInput(m, "jr_1", 0)
	in.Action = manifests.Step{Name: "first", RunAgent: &manifests.RunAgent{Mode: "session", Harness: "agent_a", ModelProvider: ModelProviderSvcInference,
		Command: []string{"sh", "-c", `echo '{"model": "big", "input_tokens": 1000000}' > $SVC_USAGE; echo '{"summary": "s"}' > $SVC_OUTPUT`}}}
	res, err := a.RunStep(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != run.Succeeded || tokens.n != 1 {
		t.Fatalf("step: %s %q, tokens minted %d", res.Status, res.ErrorMessage, tokens.n)
	}
	if e := timelineEntry(st.runs["jr_1"], "first"); e.InferenceCostCents != 0 || len(e.Usage) != 0 {
		t.Errorf("the agent's own usage was booked: cost %d usage %+v", e.InferenceCostCents, e.Usage)
	}
}
