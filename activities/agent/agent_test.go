package agent

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linefactory/linefactory/manifests"
	"github.com/linefactory/linefactory/manifests/agentconf"
)

func TestBuildArgv(t *testing.T) {
	tmpl := []string{"agent", "run", "--prompt-file={{prompt_file}}", "--model={{model}}", "--effort={{ effort }}", "{{session_id}}", "--cwd={{workdir}}", "--x={{unknown}}", "literal"}
	got := BuildArgv(tmpl, map[string]string{"prompt_file": "/p", "model": "m", "workdir": "/w"})
	want := "agent run --prompt-file=/p --model=m --cwd=/w literal"
	if strings.Join(got, " ") != want {
		t.Errorf("got %q, want %q", strings.Join(got, " "), want)
	}
}

func TestCommand(t *testing.T) {
	h := agentconf.Harness{Command: []string{"a", "run"}, ResumeCommand: []string{"a", "resume"}}
	for _, tc := range []struct {
		step     []string
		resuming bool
		want     string
	}{
		{nil, false, "a run"}, {nil, true, "a resume"}, {[]string{"own"}, true, "own"},
	} {
		if got := strings.Join(Command(h, tc.step, tc.resuming), " "); got != tc.want {
			t.Errorf("Command(%v, %v) = %q, want %q", tc.step, tc.resuming, got, tc.want)
		}
	}
	if got := strings.Join(Command(agentconf.Harness{Command: []string{"a"}}, nil, true), " "); got != "a" {
		t.Errorf("resume without resume_command = %q, want the command", got)
	}
}

func TestFilesAndEnv(t *testing.T) {
	f, err := NewFiles(filepath.Join(t.TempDir(), "step"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.WritePrompt("do it"); err != nil {
		t.Fatal(err)
	}
	if err := f.WriteKnowledge([]Knowledge{{Slug: "guide", VersionNumber: 2, ContentHash: "sha256:aa", Format: "markdown", Body: "# G"},
		{Slug: "notes", VersionNumber: 1, ContentHash: "sha256:bb", Format: "text", Body: "n"}}, nil); err != nil {
		t.Fatal(err)
	}
	if err := f.WriteMCPConfig([]manifests.MCPServer{{Key: "tracker", URL: "http://127.0.0.1:9000/mcp"}}); err != nil {
		t.Fatal(err)
	}
	req := false
	schema := OutputSchema([]string{"decision", "score", "tags"}, map[string]string{"score": "points"}, map[string]manifests.JobOutputSpec{
		"decision": {Type: "string", Enum: []any{"approve", "reject"}}, "score": {Type: "number", Required: &req}, "tags": {Type: "array", Items: "string"}})
	if err := f.WriteOutputSchema(schema); err != nil {
		t.Fatal(err)
	}
	if body, _ := os.ReadFile(filepath.Join(f.KnowledgeDir, "guide.md")); string(body) != "# G" {
		t.Errorf("guide.md = %q", body)
	}
	if body, _ := os.ReadFile(filepath.Join(f.KnowledgeDir, "notes.txt")); string(body) != "n" {
		t.Errorf("notes.txt = %q", body)
	}
	var index []IndexEntry
	data, _ := os.ReadFile(filepath.Join(f.KnowledgeDir, "index.json"))
	if err := json.Unmarshal(data, &index); err != nil || len(index) != 2 || index[0].Slug != "guide" || index[0].VersionNumber != 2 ||
		index[0].ContentHash != "sha256:aa" || index[1].Path != filepath.Join(f.KnowledgeDir, "notes.txt") {
		t.Errorf("index.json: %s (%v)", data, err)
	}
	var mcp map[string]map[string]map[string]string
	data, _ = os.ReadFile(f.MCPConfig)
	if err := json.Unmarshal(data, &mcp); err != nil || mcp["mcpServers"]["tracker"]["type"] != "http" || mcp["mcpServers"]["tracker"]["url"] != "http://127.0.0.1:9000/mcp" {
		t.Errorf("mcp config: %s (%v)", data, err)
	}
	var sch map[string]any
	data, _ = os.ReadFile(f.OutputSchema)
	if err := json.Unmarshal(data, &sch); err != nil {
		t.Fatal(err)
	}
	props := sch["properties"].(map[string]any)
	if sch["$schema"] != "https://json-schema.org/draft/2020-12/schema" || props["points"].(map[string]any)["type"] != "number" ||
		props["tags"].(map[string]any)["items"].(map[string]any)["type"] != "string" || len(props["decision"].(map[string]any)["enum"].([]any)) != 2 {
		t.Errorf("schema: %s", data)
	}
	if r := sch["required"].([]any); len(r) != 2 || r[0] != "decision" || r[1] != "tags" {
		t.Errorf("required: %v", r)
	}
	if _, err := os.Stat(f.Output); !os.IsNotExist(err) {
		t.Errorf("output file pre-created: %v", err)
	}

	s := Step{Harness: "agent_a", Model: "large", RunID: "jr_1", Step: "s", SessionID: "abc", Session: true, HarnessEnv: map[string]string{"A": "1"}}
	env := Env(s, f)
	for k, want := range map[string]string{"A": "1", "SVC_HARNESS": "agent_a", "SVC_MODEL": "large", "SVC_EFFORT": "", "SVC_JOB_RUN_ID": "jr_1", "SVC_STEP": "s",
		"SVC_OUTPUT": f.Output, "SVC_OUTPUT_SCHEMA": f.OutputSchema, "SVC_PROMPT_FILE": f.PromptFile, "SVC_KNOWLEDGE_DIR": f.KnowledgeDir,
		"SVC_MCP_CONFIG": f.MCPConfig, "SVC_SESSION_ID": "abc", "SVC_SESSION_FILE": f.SessionFile, "SVC_USAGE": f.Usage, "SVC_ARTIFACTS": f.Artifacts} {
		if got, ok := env[k]; !ok || got != want {
			t.Errorf("env %s = %q (set %v), want %q", k, got, ok, want)
		}
	}
	s.Session = false
	env = Env(s, f)
	for _, k := range []string{"SVC_PROMPT_FILE", "SVC_KNOWLEDGE_DIR", "SVC_SESSION_ID", "SVC_OUTPUT"} {
		if _, ok := env[k]; ok {
			t.Errorf("exec mode env has %s", k)
		}
	}
	ph := Placeholders(Step{Model: "m", SessionID: "x"}, f, "/w")
	if ph["prompt_file"] != f.PromptFile || ph["session_id"] != "x" || ph["workdir"] != "/w" || ph["effort"] != "" || ph["output_schema"] != f.OutputSchema {
		t.Errorf("placeholders %v", ph)
	}
}

func TestParseOutputObject(t *testing.T) {
	lines, raw, err := ParseOutputObject([]byte(`{"b": [1, 2], "a": "x y"}`), true)
	if err != nil || string(lines) != "a=\"x y\"\nb=[1,2]\n" || string(raw["a"]) != `"x y"` {
		t.Errorf("got %q %v", lines, err)
	}
	for _, tc := range []struct {
		data    string
		present bool
		want    string
	}{
		{"", false, "wrote no output object"},
		{"", true, "is not one JSON object"},
		{`[1]`, true, "is not one JSON object"},
		{`null`, true, "is not one JSON object"},
		{`{"a":1} {"b":2}`, true, "more than one JSON value"},
		{`{"a=b":1}`, true, "is not an output key"},
		{`{"a":` + strings.Repeat(" ", MaxOutputBytes) + `1}`, true, "over the"},
	} {
		if _, _, err := ParseOutputObject([]byte(tc.data), tc.present); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%.20q: got %v, want %q", tc.data, err, tc.want)
		}
	}
}

func TestUsageAndSession(t *testing.T) {
	u, err := ParseUsage([]byte("{\"model\": \"m\", \"input_tokens\": 10, \"output_tokens\": 2, \"cached\": 1}\n\n{\"input_tokens\": 5}\n"))
	if err != nil || len(u) != 2 || u[0].Model != "m" || u[0].InputTokens != 10 || u[1].InputTokens != 5 {
		t.Errorf("usage %+v %v", u, err)
	}
	if _, err := ParseUsage([]byte("{\"input_tokens\": -1}\n")); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("negative tokens: %v", err)
	}
	if _, err := ParseUsage([]byte("x\n")); err == nil {
		t.Error("bad usage line accepted")
	}
	dir := t.TempDir()
	if id, err := ReadSessionID(filepath.Join(dir, "none")); id != "" || err != nil {
		t.Errorf("missing session file: %q %v", id, err)
	}
	p := filepath.Join(dir, "sid")
	_ = os.WriteFile(p, []byte("  abc-123\n"), 0o644)
	if id, err := ReadSessionID(p); id != "abc-123" || err != nil {
		t.Errorf("session id %q %v", id, err)
	}
	_ = os.Symlink(p, filepath.Join(dir, "link"))
	if _, err := ReadLimited(filepath.Join(dir, "link"), 10); err == nil {
		t.Error("a symlink was followed")
	}
}
