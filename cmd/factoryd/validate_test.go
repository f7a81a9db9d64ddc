package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/linefactory/linefactory/manifests/tree"
)

func TestValidateExamples(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := runValidate([]string{"../../manifests/examples"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out.String(), errOut.String())
	}
	if !strings.HasPrefix(out.String(), "ok: ") {
		t.Fatalf("output %q, want an ok summary", out.String())
	}
}

func TestValidateReportsFileLocationMessage(t *testing.T) {
	dir := t.TempDir()
	write := func(rel, body string) string {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	jobFile := write("jobs/build/job.toml", "[job]\nname = \"other\"\n[[run.tasks]]\nname = \"t\"\n[[run.tasks.steps]]\nexec = [\"true\"]\npause = true\n")
	lineFile := write("lines/l.toml", "[line]\nname = \"l\"\n[trigger]\ntype = \"manual\"\n[[stages]]\nid = \"a\"\njob = \"nope\"\n")
	var out, errOut bytes.Buffer
	if code := runValidate([]string{dir}, &out, &errOut); code != 1 {
		t.Fatalf("exit %d, want 1\n%s", code, out.String())
	}
	for _, want := range []string{
		jobFile + ": run.tasks[0].steps[0]: exactly one of exec, run_agent, snapshot, pause, resume, delete must be set",
		jobFile + `: job.name: name "other" does not match the path name "build"`,
		lineFile + `: stages[0].job: unknown job "nope"`,
	} {
		if !strings.Contains(out.String(), want+"\n") {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	// A line given alone gets every check but job existence.
	out.Reset()
	if code := runValidate([]string{lineFile}, &out, &errOut); code != 0 {
		t.Fatalf("line alone: exit %d\n%s", code, out.String())
	}
}

func writeFile(t *testing.T, dir, rel, body string) string {
	t.Helper()
	p := filepath.Join(dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestValidateTellsLinesFromJobs: a file is a line when its top level has a
// "line" key, whatever else its text contains.
func TestValidateTellsLinesFromJobs(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, file, body string
		line             bool
	}{
		{"json line whose stages name jobs", "l.json",
			`{"line":{"name":"l"},"trigger":{"type":"manual"},"stages":[{"id":"a","job":"hello"}]}`, true},
		{"toml line with dotted keys", "l.toml",
			"line.name = \"l\"\ntrigger.type = \"manual\"\n[[stages]]\nid = \"a\"\njob = \"hello\"\n", true},
		{"toml line with an inline table", "inline.toml",
			"line = { name = \"l\" }\ntrigger = { type = \"manual\" }\n[[stages]]\nid = \"a\"\njob = \"hello\"\n", true},
		{"json job mentioning line", "j.json",
			`{"job":{"name":"j","description":"\"line\""},"run":{"tasks":[{"name":"t","steps":[{"exec":["true"]}]}]}}`, false},
		{"toml job with a [job] table", "j.toml",
			"# [line]\n[job]\nname = \"j\"\n[[run.tasks]]\nname = \"t\"\n[[run.tasks.steps]]\nexec = [\"true\"]\n", false},
		{"undecodable file", "bad.toml", "[line\n", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := writeFile(t, dir, tc.file, tc.body)
			if got := tree.IsLineFile(p); got != tc.line {
				t.Fatalf("IsLineFile = %v, want %v", got, tc.line)
			}
			if tc.name == "undecodable file" {
				return
			}
			var out, errOut bytes.Buffer
			if code := runValidate([]string{p}, &out, &errOut); code != 0 {
				t.Fatalf("exit %d, want 0\n%s%s", code, out.String(), errOut.String())
			}
		})
	}
}

// TestValidateJobExistence: lines found in a directory are checked against
// the jobs found there, even when there are none; a line file alone is not.
func TestValidateJobExistence(t *testing.T) {
	dir := t.TempDir()
	line := writeFile(t, dir, "lines/l.toml", "[line]\nname = \"l\"\n[trigger]\ntype = \"manual\"\n[[stages]]\nid = \"a\"\njob = \"hello\"\n")
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"directory without jobs", []string{dir}, 1, line + `: stages[0].job: unknown job "hello"`},
		{"line file alone", []string{line}, 0, "ok: 1 files"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if code := runValidate(tc.args, &out, &errOut); code != tc.code {
				t.Fatalf("exit %d, want %d\n%s%s", code, tc.code, out.String(), errOut.String())
			}
			if !strings.Contains(out.String(), tc.want+"\n") {
				t.Fatalf("output lacks %q:\n%s", tc.want, out.String())
			}
		})
	}
}

func TestValidateWithConfig(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := runValidate([]string{"--config", "../../manifests/examples/factory.toml", "../../manifests/examples"}, &out, &errOut); code != 0 {
		t.Fatalf("examples with their config: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	dir := t.TempDir()
	cfg := writeFile(t, dir, "factory.toml", "[harnesses.agent_a]\ncommand = [\"a\"]\nefforts = [\"low\", \"medium\", \"high\"]\n[[harnesses.agent_a.models]]\nname = \"alpha-small\"\n")
	job := writeFile(t, dir, "jobs/j/job.toml", "[job]\nname = \"j\"\n[[run.tasks]]\nname = \"t\"\n[[run.tasks.steps]]\nexec = [\"true\"]\n"+
		"[[run.tasks.steps]]\nrun_agent = { mode = \"session\", harness = \"agent_a\", model = \"alpha-small\", effort = \"max\" }\n"+
		"[[run.tasks.steps]]\nrun_agent = { mode = \"session\", harness = \"agent_b\" }\n")
	out.Reset()
	if code := runValidate([]string{"--config=" + cfg, dir}, &out, &errOut); code != 1 {
		t.Fatalf("exit %d, want 1\n%s", code, out.String())
	}
	for _, want := range []string{
		job + `: run.tasks[0].steps[1].run_agent.effort: "max" is not an effort of agent_a/alpha-small (low, medium, high)`,
		job + `: run.tasks[0].steps[2].run_agent.harness: harness "agent_b" is not configured on this server`,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	// Without --config the same job is only linted.
	out.Reset()
	if code := runValidate([]string{dir}, &out, &errOut); code != 0 {
		t.Fatalf("without --config: exit %d\n%s", code, out.String())
	}
	bad := writeFile(t, dir, "bad.toml", "[harnesses.agent_a]\n")
	errOut.Reset()
	if code := runValidate([]string{"--config", bad, dir}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), bad+": harnesses.agent_a.command: required") {
		t.Fatalf("bad config: exit %d, stderr %q", code, errOut.String())
	}
}

// TestValidateDeepManifests: factoryd validate rejects manifests nested
// 100,000 deep (TOML and JSON) by the depth limit, quickly.
func TestValidateDeepManifests(t *testing.T) {
	dir := t.TempDir()
	deep := strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000)
	tomlFile := writeFile(t, dir, "jobs/deep/job.toml", "[job]\nname = \"deep\"\n[job.params.p]\ntype = \"array\"\ndefault = "+deep+"\n")
	jsonFile := writeFile(t, dir, "jobs/deeper/job.json", `{"job": {"name": "deeper", "params": {"p": {"type": "array", "default": `+deep+`}}}}`)
	var out, errOut bytes.Buffer
	start := time.Now()
	if code := runValidate([]string{dir}, &out, &errOut); code != 1 {
		t.Fatalf("exit %d, want 1\n%s%s", code, out.String(), errOut.String())
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("validate took %v", took)
	}
	for _, f := range []string{tomlFile, jsonFile} {
		if !strings.Contains(out.String(), f+": the manifest nesting depth is ") {
			t.Errorf("output lacks the depth limit for %s:\n%s", f, out.String())
		}
	}
}
