package sandbox

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/linefactory/linefactory/manifests"
)

// git runs git in dir for a test.
func git(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t",
		"GIT_COMMITTER_EMAIL=t@example.com", "GIT_CONFIG_GLOBAL=/dev/null")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
}

// bareRepo makes a bare repository with a main and a feature branch and
// returns its file:// URL.
func bareRepo(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	bare, work := filepath.Join(dir, "repo.git"), filepath.Join(dir, "work")
	git(t, dir, "init", "--quiet", "--bare", "-b", "main", bare)
	git(t, dir, "init", "--quiet", "-b", "main", work)
	if err := os.WriteFile(filepath.Join(work, "README"), []byte("main\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git(t, work, "add", "README")
	git(t, work, "commit", "--quiet", "-m", "main")
	git(t, work, "checkout", "--quiet", "-b", "feature")
	if err := os.WriteFile(filepath.Join(work, "README"), []byte("feature\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git(t, work, "commit", "--quiet", "-am", "feature")
	git(t, work, "push", "--quiet", bare, "main", "feature")
	return "file://" + bare
}

func TestSourcesCloneBranchAndTargetPath(t *testing.T) {
	l := newLocal(t)
	url := bareRepo(t)
	sb := acquire(t, l, Spec{Mode: "provision", Name: "src", InternetEnabled: true, Sources: []manifests.GitSource{
		{RepoURL: url},
		{RepoURL: url, Branch: "feature", TargetPath: "code/feat"},
	}, SetupScripts: []manifests.SetupScript{{Script: "cat code/feat/README > seen"}}})
	for path, want := range map[string]string{"repo/README": "main\n", "code/feat/README": "feature\n", "seen": "feature\n"} {
		if got, err := os.ReadFile(filepath.Join(sb.Root, path)); err != nil || string(got) != want {
			t.Errorf("%s = %q (%v), want %q", path, got, err, want)
		}
	}
	if _, err := l.Acquire(context.Background(), Spec{Mode: "provision", Name: "esc", InternetEnabled: true,
		Sources: []manifests.GitSource{{RepoURL: url, TargetPath: "../../x"}}}); CodeOf(err) != CodeFileOperation {
		t.Fatalf("target_path escaping the workspace: %v", err)
	}
}

func TestProvisioningHasNetworkStepsDoNot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIPPING: network namespaces need root")
	}
	l := newLocal(t)
	sb := acquire(t, l, Spec{Mode: "provision", Name: "offline", InternetEnabled: false,
		SetupScripts: []manifests.SetupScript{{Script: "cat /proc/net/dev > setup-ifaces"}}})
	var out bytes.Buffer
	if _, err := l.Exec(context.Background(), ExecRequest{Sandbox: sb.Name, Argv: []string{"cat /proc/net/dev"}, Stdout: &out}); err != nil {
		t.Fatal(err)
	}
	setup, _ := os.ReadFile(filepath.Join(sb.Root, "setup-ifaces"))
	host, _ := os.ReadFile("/proc/net/dev")
	if got, want := interfaces(string(setup)), interfaces(string(host)); got != want {
		t.Errorf("setup scripts saw interfaces %s, want the host's %s", got, want)
	}
	if got := interfaces(out.String()); got != "lo" {
		t.Errorf("a step saw interfaces %s, want lo", got)
	}
}

// interfaces lists the interface names of a /proc/net/dev.
func interfaces(dev string) string {
	var names []string
	for _, line := range strings.Split(dev, "\n") {
		if name, _, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			names = append(names, name)
		}
	}
	return strings.Join(names, ",")
}

func TestProvisionIsIdempotentPerKey(t *testing.T) {
	l := newLocal(t)
	ctx := context.Background()
	spec := Spec{Mode: "provision", Name: "sbx-jr_1-0", Key: "jr_1/0", InternetEnabled: true}
	first, err := l.Acquire(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	again, err := l.Acquire(ctx, spec)
	if err != nil || !again.Created || again.Root != first.Root || again.State != StateRunning {
		t.Fatalf("retried provision: %+v %v", again, err)
	}
	other := spec
	other.Key = "jr_2/0"
	if _, err := l.Acquire(ctx, other); CodeOf(err) != CodeAlreadyExists {
		t.Fatalf("provision by another run: %v", err)
	}
}

func TestHalfBuiltSandbox(t *testing.T) {
	l := newLocal(t)
	ctx := context.Background()
	// A crash during setup leaves the state file in provisioning.
	halfBuilt := func(name string) {
		t.Helper()
		sb := acquire(t, l, Spec{Mode: "provision", Name: name, Key: "k", InternetEnabled: true})
		sb.State = StateProvisioning
		if err := l.save(sb); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(sb.Root, "partial"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	halfBuilt("ws")
	if _, err := l.Acquire(ctx, Spec{Mode: "reuse", Name: "ws"}); CodeOf(err) != CodeInvalidState {
		t.Fatalf("reuse of a half-built sandbox: %v, want %s", err, CodeInvalidState)
	}
	sb, err := l.Acquire(ctx, Spec{Mode: "ensure", Name: "ws", InternetEnabled: true,
		SetupScripts: []manifests.SetupScript{{Script: "touch done"}}})
	if err != nil || !sb.Created || sb.State != StateRunning {
		t.Fatalf("ensure of a half-built sandbox: %+v %v", sb, err)
	}
	if _, err := os.Stat(filepath.Join(sb.Root, "partial")); !os.IsNotExist(err) {
		t.Fatal("ensure kept the half-built workspace")
	}
	halfBuilt("again")
	sb, err = l.Acquire(ctx, Spec{Mode: "provision", Name: "again", Key: "k", InternetEnabled: true})
	if err != nil || sb.State != StateRunning {
		t.Fatalf("retried provision of a half-built sandbox: %+v %v", sb, err)
	}
}

func TestCancelDuringSetupKillsItAndCleansUp(t *testing.T) {
	l := newLocal(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := l.Acquire(ctx, Spec{Mode: "ensure", Name: "slow", InternetEnabled: true,
			SetupScripts: []manifests.SetupScript{{Script: "echo $$ > " + pidFile + "; exec sleep 600"}}})
		errc <- err
	}()
	pid := waitPid(t, pidFile)
	if sb, err := l.Get(context.Background(), "slow"); err != nil || sb.State != StateProvisioning {
		t.Fatalf("during setup: %+v %v, want state provisioning", sb, err)
	}
	cancel()
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("cancelled acquire succeeded")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("cancel did not stop the setup script")
	}
	if syscall.Kill(pid, 0) == nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		t.Fatal("the setup script outlived the cancellation")
	}
	if _, err := l.Get(context.Background(), "slow"); CodeOf(err) != CodeNotFound {
		t.Fatalf("a cancelled provision left its sandbox: %v", err)
	}
}

func TestExecDoesNotWaitForPipesHeldOutsideTheGroup(t *testing.T) {
	l := newLocal(t)
	sb := acquire(t, l, Spec{InternetEnabled: true})
	pidFile := filepath.Join(t.TempDir(), "pid")
	start := time.Now()
	var out bytes.Buffer
	// setsid leaves the process group but keeps stdout.
	res, err := l.Exec(context.Background(), ExecRequest{Sandbox: sb.Name, Stdout: &out,
		Argv: []string{"setsid sh -c 'echo $$ > " + pidFile + ".tmp; mv " + pidFile + ".tmp " + pidFile + "; exec sleep 600' & " +
			"while [ ! -s " + pidFile + " ]; do sleep 0.05; done; echo main done"}})
	pid := waitPid(t, pidFile)
	defer syscall.Kill(pid, syscall.SIGKILL)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec: %+v %v", res, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("exec waited %s for a pipe held by a process outside its group", d)
	}
	if !strings.Contains(out.String(), "main done") {
		t.Fatalf("stdout %q", out.String())
	}
}

func TestKillLeftovers(t *testing.T) {
	l := newLocal(t)
	sb := acquire(t, l, Spec{Mode: "provision", Name: "crashed", InternetEnabled: true})
	start := func(owner string) *exec.Cmd {
		cmd := exec.Command("sleep", "600")
		cmd.Env = []string{markerEnv + "=" + l.groupPrefix + "-" + sb.Name + "/" + owner}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	dead := start("999999999.1")                                               // its worker is gone
	live := start(l.owner)                                                     // this worker's own: spared
	other, err := NewLocalWith(t.TempDir(), Options{Isolation: IsolationNone}) // another data dir's driver touches nothing here
	if err != nil {
		t.Fatal(err)
	}
	if got := other.KillLeftovers(); len(got) != 0 {
		t.Fatalf("another driver killed %v", got)
	}
	killed := l.KillLeftovers()
	if len(killed) != 1 || killed[0] != dead.Process.Pid {
		t.Fatalf("killed %v, want [%d]", killed, dead.Process.Pid)
	}
	if err := dead.Wait(); err == nil {
		t.Fatal("the leftover exited normally")
	}
	if syscall.Kill(live.Process.Pid, 0) != nil {
		t.Fatal("a live worker's process was killed")
	}
}
