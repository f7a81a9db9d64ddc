package agent

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"

	"github.com/linefactory/linefactory/manifests"
	"github.com/linefactory/linefactory/manifests/agentconf"
)

// MaxOutputBytes caps the session output object (as $SVC_OUTPUT for exec).
const MaxOutputBytes = manifests.MaxOutputFileBytes

// MaxSideFileBytes caps the session, usage and artifacts files read back.
const MaxSideFileBytes = 1 << 20

var holderRE = regexp.MustCompile(`\{\{\s*([^}]*?)\s*\}\}`)

// BuildArgv fills a harness command template: each {{placeholder}} takes its
// value from values; an argument holding a placeholder whose value is empty
// (or unknown) is dropped whole.
func BuildArgv(template []string, values map[string]string) []string {
	out := make([]string, 0, len(template))
	for _, arg := range template {
		drop := false
		filled := holderRE.ReplaceAllStringFunc(arg, func(m string) string {
			v := values[holderRE.FindStringSubmatch(m)[1]]
			if v == "" {
				drop = true
			}
			return v
		})
		if !drop {
			out = append(out, filled)
		}
	}
	return out
}

// Knowledge is one bound knowledge version as the run recorded it.
type Knowledge struct {
	Slug          string `json:"slug"`
	VersionID     string `json:"version_id"`
	VersionNumber int    `json:"version_number"`
	ContentHash   string `json:"content_hash"`
	Format        string `json:"-"`
	Body          string `json:"-"`
}

// Files are the paths of a step's prepared and expected files.
type Files struct {
	Dir          string
	PromptFile   string // "" when the step has no prompt
	KnowledgeDir string // "" when the step binds no knowledge
	MCPConfig    string // "" when the step has no mcp
	OutputSchema string // "" when the step claims no outputs
	Output       string // session: the output object; never pre-created
	SessionFile  string
	Usage        string
	Artifacts    string
}

// NewFiles names the files of a step under dir (created, empty of outputs).
func NewFiles(dir string) (Files, error) {
	if err := os.RemoveAll(dir); err != nil {
		return Files{}, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Files{}, err
	}
	return Files{Dir: dir, Output: filepath.Join(dir, "svc_output."+filepath.Base(dir)+".json"), SessionFile: filepath.Join(dir, "session_id"),
		Usage: filepath.Join(dir, "usage.jsonl"), Artifacts: filepath.Join(dir, "artifacts.jsonl")}, nil
}

// Mapped is f with every path but Output as the step's commands see it
// (the sandbox driver places Output itself).
func (f Files) Mapped(inside func(string) string) Files {
	m := f
	for _, p := range []*string{&m.Dir, &m.PromptFile, &m.KnowledgeDir, &m.MCPConfig, &m.OutputSchema, &m.SessionFile, &m.Usage, &m.Artifacts} {
		*p = inside(*p)
	}
	return m
}

// WritePrompt writes the prompt text.
func (f *Files) WritePrompt(text string) error {
	f.PromptFile = filepath.Join(f.Dir, "prompt.md")
	return os.WriteFile(f.PromptFile, []byte(text), 0o644)
}

// IndexEntry is one line of the knowledge directory's index.json.
type IndexEntry struct {
	Slug          string `json:"slug"`
	VersionNumber int    `json:"version_number"`
	ContentHash   string `json:"content_hash"`
	Path          string `json:"path"`
}

// KnowledgeFileName is <slug>.md for markdown, <slug>.txt otherwise.
func KnowledgeFileName(k Knowledge) string {
	if k.Format == "markdown" || k.Format == "md" {
		return k.Slug + ".md"
	}
	return k.Slug + ".txt"
}

// WriteKnowledge writes each item and index.json into the knowledge dir;
// index.json names each file as the step sees it (inside; nil: as is).
func (f *Files) WriteKnowledge(items []Knowledge, inside func(string) string) error {
	if inside == nil {
		inside = func(p string) string { return p }
	}
	f.KnowledgeDir = filepath.Join(f.Dir, "knowledge")
	if err := os.MkdirAll(f.KnowledgeDir, 0o755); err != nil {
		return err
	}
	index := make([]IndexEntry, 0, len(items))
	for _, k := range items {
		name := KnowledgeFileName(k)
		p := filepath.Join(f.KnowledgeDir, name)
		if err := os.WriteFile(p, []byte(k.Body), 0o644); err != nil {
			return err
		}
		index = append(index, IndexEntry{Slug: k.Slug, VersionNumber: k.VersionNumber, ContentHash: k.ContentHash, Path: inside(p)})
	}
	data, err := json.MarshalIndent(index, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(f.KnowledgeDir, "index.json"), data, 0o644)
}

// MCPConfig is the document of SVC_MCP_CONFIG.
func MCPConfig(servers []manifests.MCPServer) []byte {
	type server struct {
		Type string `json:"type"`
		URL  string `json:"url"`
	}
	doc := map[string]map[string]server{"mcpServers": {}}
	for _, s := range servers {
		doc["mcpServers"][s.Key] = server{Type: "http", URL: s.URL}
	}
	data, _ := json.MarshalIndent(doc, "", "  ")
	return data
}

// WriteMCPConfig writes the MCP configuration file.
func (f *Files) WriteMCPConfig(servers []manifests.MCPServer) error {
	f.MCPConfig = filepath.Join(f.Dir, "mcp.json")
	return os.WriteFile(f.MCPConfig, MCPConfig(servers), 0o644)
}

// OutputSchema is the JSON Schema (2020-12) of a session's output object:
// the claimed keys (as written: a claim's `from`), their types, and
// `required` for required outputs.
func OutputSchema(claimed []string, from map[string]string, specs map[string]manifests.JobOutputSpec) map[string]any {
	props := map[string]any{}
	required := []string{}
	for _, key := range claimed {
		name := key
		if f := from[key]; f != "" {
			name = f
		}
		spec := specs[key]
		p := map[string]any{}
		switch spec.Type {
		case manifests.TypeArray:
			p["type"] = "array"
			if spec.Items != "" {
				p["items"] = map[string]any{"type": spec.Items}
			}
		case "":
		default:
			p["type"] = spec.Type
		}
		if len(spec.Enum) > 0 {
			p["enum"] = spec.Enum
		}
		if spec.Description != "" {
			p["description"] = spec.Description
		}
		props[name] = p
		if spec.Required == nil || *spec.Required {
			required = append(required, name)
		}
	}
	sort.Strings(required)
	return map[string]any{
		"$schema":              "https://json-schema.org/draft/2020-12/schema",
		"type":                 "object",
		"properties":           props,
		"required":             required,
		"additionalProperties": false,
	}
}

// WriteOutputSchema writes the output schema file.
func (f *Files) WriteOutputSchema(schema map[string]any) error {
	f.OutputSchema = filepath.Join(f.Dir, "output_schema.json")
	data, err := json.MarshalIndent(schema, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(f.OutputSchema, data, 0o644)
}

// Step is what the environment of a run_agent step is made of.
type Step struct {
	Harness, Model, Effort string
	RunID, Step            string
	SessionID              string // when resuming
	Session                bool   // session mode
	HarnessEnv             map[string]string
}

// Env is the environment of a run_agent step (AGENTS.md), over the
// harness's env. SVC_OUTPUT is the caller's (exec: as for exec).
func Env(s Step, f Files) map[string]string {
	env := map[string]string{}
	for k, v := range s.HarnessEnv {
		env[k] = v
	}
	set := func(k, v string) {
		if v != "" {
			env[k] = v
		}
	}
	env["SVC_HARNESS"], env["SVC_MODEL"], env["SVC_EFFORT"] = s.Harness, s.Model, s.Effort
	env["SVC_JOB_RUN_ID"], env["SVC_STEP"] = s.RunID, s.Step
	set("SVC_USAGE", f.Usage)
	set("SVC_ARTIFACTS", f.Artifacts)
	set("SVC_SESSION_FILE", f.SessionFile)
	if s.Session {
		set("SVC_OUTPUT", f.Output)
		set("SVC_OUTPUT_SCHEMA", f.OutputSchema)
		set("SVC_PROMPT_FILE", f.PromptFile)
		set("SVC_KNOWLEDGE_DIR", f.KnowledgeDir)
		set("SVC_MCP_CONFIG", f.MCPConfig)
		set("SVC_SESSION_ID", s.SessionID)
	}
	return env
}

// Placeholders are the values of a harness command's placeholders.
func Placeholders(s Step, f Files, workdir string) map[string]string {
	return map[string]string{"prompt_file": f.PromptFile, "model": s.Model, "effort": s.Effort, "mcp_config": f.MCPConfig,
		"session_id": s.SessionID, "output_schema": f.OutputSchema, "workdir": workdir}
}

// Command is the harness command of a session step: resume_command when
// resuming and the harness has one, else command; the step's own command,
// when given, overrides the harness's.
func Command(h agentconf.Harness, stepCommand []string, resuming bool) []string {
	switch {
	case len(stepCommand) > 0:
		return stepCommand
	case resuming && len(h.ResumeCommand) > 0:
		return h.ResumeCommand
	}
	return h.Command
}

// OutputError is a missing or malformed session output (OUTPUT_INVALID).
type OutputError struct{ Msg string }

func (e *OutputError) Error() string { return e.Msg }

// ReadLimited reads a file the step wrote, without following a symlink;
// a missing file is (nil, nil); one past limit is an error.
func ReadLimited(path string, limit int64) ([]byte, error) {
	// Opened without following a symlink and checked on the open handle, so
	// the step cannot swap the file for a link between a check and the
	// read; O_NONBLOCK keeps a FIFO from blocking the open.
	fh, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("%s is not a regular file", filepath.Base(path))
	}
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", filepath.Base(path))
	}
	if fi.Size() > limit {
		return nil, fmt.Errorf("%s is %d bytes, over the %d byte cap", filepath.Base(path), fi.Size(), limit)
	}
	data, err := io.ReadAll(io.LimitReader(fh, limit+1))
	if err == nil && int64(len(data)) > limit {
		err = fmt.Errorf("%s is over the %d byte cap", filepath.Base(path), limit)
	}
	return data, err
}

// ParseOutputObject reads a session's output: one JSON object. It returns
// the object's members as key=value lines (JSON values) for the claimed
// outputs' checks, and the members as written.
func ParseOutputObject(data []byte, present bool) ([]byte, map[string]json.RawMessage, error) {
	if !present {
		return nil, nil, &OutputError{Msg: "the session wrote no output object to $SVC_OUTPUT"}
	}
	if len(data) > MaxOutputBytes {
		return nil, nil, &OutputError{Msg: fmt.Sprintf("$SVC_OUTPUT is %d bytes, over the %d byte cap", len(data), MaxOutputBytes)}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var obj map[string]json.RawMessage
	if err := dec.Decode(&obj); err != nil || obj == nil {
		return nil, nil, &OutputError{Msg: "$SVC_OUTPUT is not one JSON object"}
	}
	if dec.More() {
		return nil, nil, &OutputError{Msg: "$SVC_OUTPUT holds more than one JSON value"}
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		if strings.ContainsAny(k, "=\n\r") || strings.TrimSpace(k) == "" {
			return nil, nil, &OutputError{Msg: fmt.Sprintf("$SVC_OUTPUT: %q is not an output key", k)}
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b bytes.Buffer
	for _, k := range keys {
		var compact bytes.Buffer
		if err := json.Compact(&compact, obj[k]); err != nil {
			return nil, nil, &OutputError{Msg: fmt.Sprintf("$SVC_OUTPUT: %s: %v", k, err)}
		}
		fmt.Fprintf(&b, "%s=%s\n", k, compact.Bytes())
	}
	return b.Bytes(), obj, nil
}

// ReadSessionID reads the session id the harness recorded ("" if none).
func ReadSessionID(path string) (string, error) {
	data, err := ReadLimited(path, 4096)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(data)), nil
}

// ParseUsage reads usage JSON lines {"model", "input_tokens", "output_tokens"}.
func ParseUsage(data []byte) ([]agentconf.Usage, error) {
	var out []agentconf.Usage
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), MaxSideFileBytes+1)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		dec := json.NewDecoder(strings.NewReader(line))
		var u agentconf.Usage
		if err := dec.Decode(&u); err != nil {
			return out, fmt.Errorf("$SVC_USAGE line %d: %v", n, err)
		}
		if u.InputTokens < 0 || u.OutputTokens < 0 {
			return out, fmt.Errorf("$SVC_USAGE line %d: token counts must be >= 0", n)
		}
		out = append(out, u)
	}
	return out, sc.Err()
}
