package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/linefactory/linefactory/manifests/manifesttest"
)

// buildFactoryctl builds the client binary once per test.
func buildFactoryctl(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "factoryctl")
	if out, err := exec.Command("go", "build", "-o", bin, "../factoryctl").CombinedOutput(); err != nil {
		t.Fatalf("build factoryctl: %v\n%s", err, out)
	}
	return bin
}

// exampleConfig makes the daemons of a test use the example server
// configuration (as make run does), so the examples' agent jobs deploy.
func exampleConfig(t *testing.T) {
	p, err := filepath.Abs("../../manifests/examples/factory.toml")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("FACTORY_CONFIG", p)
}

// ctlEnv is the environment factoryctl runs with against a daemon.
func ctlEnv(t *testing.T, d *daemon) []string {
	return []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "FACTORY_URL=" + d.base, "FACTORY_TOKEN=" + e2eToken}
}

func runCtl(t *testing.T, bin string, env []string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), out.String()
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0, out.String()
}

// TestEndToEndCLI: factoryctl against factoryd with its embedded Temporal:
// deploy the examples, run a line with --wait --follow (every stage is
// printed, exit 0), and a failing line (exit 1 with its failure code and
// domain).
func TestEndToEndCLI(t *testing.T) {
	ctl := buildFactoryctl(t)
	exampleConfig(t)
	d := startDaemon(t, t.TempDir(), nil)
	env := ctlEnv(t, d)

	code, out := runCtl(t, ctl, env, "deploy", "-o", "table", "../../manifests/examples")
	if code != 0 || !regexp.MustCompile(`created +line +build-until-green`).MatchString(out) {
		t.Fatalf("deploy: exit %d\n%s", code, out)
	}
	code, out = runCtl(t, ctl, env, "run", "line", "build-until-green", "-p", "who=you", "--wait", "--follow", "-o", "table")
	if code != 0 {
		t.Fatalf("run line: exit %d\n%s\ndaemon log:\n%s", code, out, d.log.String())
	}
	for _, want := range []string{"stage build", "stage check", "stage announce", "[check ", "path: build → check → announce", "succeeded"} {
		if !strings.Contains(out, want) {
			t.Fatalf("run line --wait --follow lacks %q:\n%s", want, out)
		}
	}

	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "jobs", "boom"), "job.toml",
		manifesttest.OneStepJob("boom", "explode", `["echo going down; exit 3"]`))
	writeFile(t, filepath.Join(dir, "lines"), "doomed.toml",
		manifesttest.OneStageLine("doomed", manifesttest.Manual, "only", "boom"))
	if code, out := runCtl(t, ctl, env, "deploy", dir); code != 0 {
		t.Fatalf("deploy doomed: exit %d\n%s", code, out)
	}
	code, out = runCtl(t, ctl, env, "run", "line", "doomed", "--wait", "--follow", "-o", "table")
	if code != 1 {
		t.Fatalf("failing line: exit %d, want 1\n%s", code, out)
	}
	for _, want := range []string{"stage only", "[only t/explode] going down", "failure: stage_failed", "domain: config"} {
		if !strings.Contains(out, want) {
			t.Fatalf("failing line output lacks %q:\n%s", want, out)
		}
	}
}

// walkthroughRE finds the README's marked walkthrough block.
var walkthroughRE = regexp.MustCompile("(?s)<!-- walkthrough:[^>]*-->\\s*```sh\\n(.*?)```")

// TestReadmeWalkthrough runs the README's walkthrough commands, as written,
// against a fresh server, so the README cannot drift from the CLI.
func TestReadmeWalkthrough(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := walkthroughRE.FindSubmatch(readme)
	if m == nil {
		t.Fatal("README.md has no marked walkthrough block (<!-- walkthrough: ... --> before a ```sh block)")
	}
	script := string(m[1])
	if !strings.Contains(script, "factoryctl run line") {
		t.Fatalf("the walkthrough runs no line:\n%s", script)
	}
	ctl := buildFactoryctl(t)
	exampleConfig(t)
	d := startDaemon(t, t.TempDir(), nil)

	// A working directory that looks like the repository after make build.
	work := t.TempDir()
	if err := os.MkdirAll(filepath.Join(work, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(ctl, filepath.Join(work, "bin", "factoryctl")); err != nil {
		t.Fatal(err)
	}
	manifestsDir, err := filepath.Abs("../../manifests")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(manifestsDir, filepath.Join(work, "manifests")); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", "-euo", "pipefail", "-x", "-c", script)
	cmd.Dir = work
	cmd.Env = ctlEnv(t, d)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the README walkthrough fails: %v\n%s\ndaemon log:\n%s", err, out, d.log.String())
	}
	if !strings.Contains(string(out), "succeeded") {
		t.Fatalf("the walkthrough ran no run to success:\n%s", out)
	}
}
