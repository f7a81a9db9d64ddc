package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
