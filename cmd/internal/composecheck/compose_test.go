package composecheck

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
)

const root = "../../.."

func loadProject(t *testing.T) *types.Project {
	t.Helper()
	opts, err := cli.NewProjectOptions([]string{filepath.Join(root, "docker-compose.yml")},
		cli.WithWorkingDirectory(root), cli.WithName("linefactory"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.LoadProject(context.Background())
	if err != nil {
		t.Fatalf("docker-compose.yml does not load: %v", err)
	}
	return p
}

// oneShots are the services others wait for to complete, not to be healthy.
func oneShots(p *types.Project) map[string]bool {
	out := map[string]bool{}
	for _, s := range p.Services {
		for name, dep := range s.DependsOn {
			if dep.Condition == types.ServiceConditionCompletedSuccessfully {
				out[name] = true
			}
		}
	}
	return out
}

// TestComposeWiring: every service starts only once what it depends on is
// healthy (or, for a one-shot setup job, completed); every long-running
// service has a health check and a restart policy.
func TestComposeWiring(t *testing.T) {
	p := loadProject(t)
	once := oneShots(p)
	for _, want := range []string{"postgres", "temporal", "factory-api", "factory-worker"} {
		if _, ok := p.Services[want]; !ok {
			t.Errorf("no service %q", want)
		}
	}
	for name, s := range p.Services {
		if once[name] {
			if !strings.HasPrefix(s.Restart, "on-failure") {
				t.Errorf("%s: one-shot job restart = %q, want on-failure[:n] (retried until it completes)", name, s.Restart)
			}
		} else {
			if s.HealthCheck == nil || s.HealthCheck.Disable || len(s.HealthCheck.Test) == 0 {
				t.Errorf("%s: no health check", name)
			}
			if s.Restart != types.RestartPolicyUnlessStopped && s.Restart != types.RestartPolicyAlways {
				t.Errorf("%s: restart = %q, want unless-stopped or always", name, s.Restart)
			}
		}
		for dep, cond := range s.DependsOn {
			target, ok := p.Services[dep]
			switch {
			case !ok:
				t.Errorf("%s depends on unknown service %s", name, dep)
			case cond.Condition == types.ServiceConditionHealthy:
				if target.HealthCheck == nil {
					t.Errorf("%s waits for %s to be healthy, which has no health check", name, dep)
				}
			case cond.Condition == types.ServiceConditionCompletedSuccessfully:
			default:
				t.Errorf("%s depends on %s with condition %q: want service_healthy (or service_completed_successfully for a setup job)", name, dep, cond.Condition)
			}
		}
	}
	for _, name := range []string{"factory-api", "factory-worker"} {
		s := p.Services[name]
		for _, dep := range []string{"postgres", "temporal"} {
			if s.DependsOn[dep].Condition != types.ServiceConditionHealthy {
				t.Errorf("%s does not wait for %s to be healthy", name, dep)
			}
		}
	}
}

// TestComposeTemporalVersion: the Temporal server and admin-tools images are
// of the embedded server's version line (go.mod's go.temporal.io/server).
func TestComposeTemporalVersion(t *testing.T) {
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*go\.temporal\.io/server v(\d+)\.(\d+)\.\d+`).FindSubmatch(mod)
	if m == nil {
		t.Fatal("go.mod: no go.temporal.io/server requirement")
	}
	line := string(m[1]) + "." + string(m[2]) + "."
	p := loadProject(t)
	found := 0
	for name, s := range p.Services {
		repo, tag, _ := strings.Cut(s.Image, ":")
		switch repo {
		case "temporalio/server", "temporalio/admin-tools":
			found++
			if !strings.HasPrefix(tag, line) {
				t.Errorf("%s: image %s is not of the embedded server's line %sx", name, s.Image, line)
			}
		case "temporalio/auto-setup":
			t.Errorf("%s: temporalio/auto-setup is deprecated upstream", name)
		}
	}
	if found == 0 {
		t.Error("no temporalio/server image")
	}
}

// readEnvNames lists the environment variables factoryd reads: the names
// in env(…), os.Getenv(…) and os.LookupEnv(…) calls of its sources.
func readEnvNames(t *testing.T) map[string]bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "cmd", "factoryd", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?:\benv|os\.Getenv|os\.LookupEnv)\("([A-Z0-9_]+)"`)
	names := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllSubmatch(src, -1) {
			names[string(m[1])] = true
		}
	}
	if len(names) < 5 {
		t.Fatalf("found only %v in cmd/factoryd: the pattern is out of date", names)
	}
	return names
}

// TestComposeFactoryEnv: every variable given to factoryd is one it reads;
// workers share a snapshot volume, keep their data in their own, and serve
// their ops endpoint, which their health check uses.
func TestComposeFactoryEnv(t *testing.T) {
	p := loadProject(t)
	known := readEnvNames(t)
	for _, name := range []string{"factory-api", "factory-worker"} {
		for k := range p.Services[name].Environment {
			if !known[k] {
				t.Errorf("%s: factoryd does not read %s", name, k)
			}
		}
	}
	w := p.Services["factory-worker"]
	env := func(k string) string {
		if v := w.Environment[k]; v != nil {
			return *v
		}
		return ""
	}
	snap := strings.TrimPrefix(env("FACTORY_SNAPSHOT_URL"), "file://")
	if snap == env("FACTORY_SNAPSHOT_URL") {
		t.Fatalf("factory-worker: FACTORY_SNAPSHOT_URL = %q, want a file:// URL on the shared volume", env("FACTORY_SNAPSHOT_URL"))
	}
	snap, _, _ = strings.Cut(snap, "?")
	shared := false
	for _, v := range w.Volumes {
		if v.Type == types.VolumeTypeVolume && v.Source != "" && (snap == v.Target || strings.HasPrefix(snap, v.Target+"/")) {
			shared = true
		}
	}
	if !shared {
		t.Errorf("factory-worker: snapshots (%s) are not on a named volume", snap)
	}
	if dataDir := env("FACTORY_DATA_DIR"); dataDir == "" || strings.HasPrefix(snap, dataDir+"/") || snap == dataDir {
		t.Errorf("factory-worker: FACTORY_DATA_DIR = %q must be set and apart from the shared snapshots", dataDir)
	}
	_, port, ok := strings.Cut(env("FACTORY_OPS_ADDR"), ":")
	if !ok || port == "" {
		t.Fatalf("factory-worker: FACTORY_OPS_ADDR = %q, want host:port", env("FACTORY_OPS_ADDR"))
	}
	if !strings.Contains(strings.Join(w.HealthCheck.Test, " "), ":"+port+"/readyz") {
		t.Errorf("factory-worker: health check %v does not ask the ops endpoint's /readyz on port %s", w.HealthCheck.Test, port)
	}
	if !slices.Contains([]string(w.Expose), port) {
		t.Errorf("factory-worker: ops port %s not exposed (%v)", port, w.Expose)
	}
	if roles := strings.Join(w.Command, " "); !strings.Contains(roles, "--roles worker") {
		t.Errorf("factory-worker: command %q does not run the worker role alone", roles)
	}
}
