package sandbox

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/linefactory/linefactory/internal/testwait"
	"github.com/linefactory/linefactory/manifests"
)

// newLocal is a driver without isolation: the tests that use it look at
// its processes and files from the host (isolation has its own tests).
func newLocal(t *testing.T) *Local {
	t.Helper()
	l, err := NewLocalWith(t.TempDir(), Options{Isolation: IsolationNone})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // remove every sandbox, and with them their cgroups
		entries, _ := os.ReadDir(filepath.Join(l.root, "sandboxes"))
		for _, e := range entries {
			_ = l.Delete(context.Background(), e.Name())
		}
		l.Close()
	})
	return l
}

func acquire(t *testing.T, l *Local, spec Spec) Sandbox {
	t.Helper()
	if spec.Mode == "" {
		spec.Mode = "provision"
	}
	spec.InternetEnabled = spec.InternetEnabled || spec.Mode == "provision" && spec.Name == ""
	sb, err := l.Acquire(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	return sb
}

func TestModes(t *testing.T) {
	l := newLocal(t)
	ctx := context.Background()
	if _, err := l.Acquire(ctx, Spec{Mode: "reuse", Name: "ws"}); CodeOf(err) != CodeNotFound {
		t.Fatalf("reuse of a missing sandbox: %v, want %s", err, CodeNotFound)
	}
	first, err := l.Acquire(ctx, Spec{Mode: "ensure", Name: "ws", InternetEnabled: true})
	if err != nil || !first.Created {
		t.Fatalf("ensure creates: %+v %v", first, err)
	}
	again, err := l.Acquire(ctx, Spec{Mode: "ensure", Name: "ws", InternetEnabled: true})
	if err != nil || again.Created || again.Root != first.Root {
		t.Fatalf("ensure reuses: %+v %v", again, err)
	}
	if _, err := l.Acquire(ctx, Spec{Mode: "provision", Name: "ws", InternetEnabled: true}); CodeOf(err) != CodeAlreadyExists {
		t.Fatalf("provision of an existing name: %v", err)
	}
	if _, err := l.Acquire(ctx, Spec{Mode: "reuse", Name: "ws"}); err != nil {
		t.Fatal(err)
	}
	gen := acquire(t, l, Spec{})
	if !strings.HasPrefix(gen.Name, "sbx-") {
		t.Fatalf("generated name %q", gen.Name)
	}
}

func TestExecResultsAndEnv(t *testing.T) {
	l := newLocal(t)
	sb := acquire(t, l, Spec{Env: map[string]string{"GREETING": "hi"}, InternetEnabled: true})
	var out, errOut bytes.Buffer
	res, err := l.Exec(context.Background(), ExecRequest{Sandbox: sb.Name, Argv: []string{"echo $GREETING $EXTRA; echo oops >&2; exit 3"},
		Env: map[string]string{"EXTRA": "there"}, Stdout: &out, Stderr: &errOut, Workdir: "sub/dir"})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 3 || out.String() != "hi there\n" || errOut.String() != "oops\n" {
		t.Fatalf("exit %d stdout %q stderr %q", res.ExitCode, out.String(), errOut.String())
	}
	if _, err := os.Stat(filepath.Join(sb.Root, "sub/dir")); err != nil {
		t.Fatalf("workdir not created: %v", err)
	}
	if _, err := l.Exec(context.Background(), ExecRequest{Sandbox: sb.Name, Argv: []string{"no-such-command-xyz", "a"}}); CodeOf(err) != CodeCommandNotFound {
		t.Fatalf("missing command: %v", err)
	}
	for _, wd := range []string{"../../etc", "/etc"} {
		if _, err := l.Exec(context.Background(), ExecRequest{Sandbox: sb.Name, Argv: []string{"true"}, Workdir: wd}); CodeOf(err) != CodeFileOperation {
			t.Fatalf("workdir %q: %v, want %s", wd, err, CodeFileOperation)
		}
	}
	if err := os.Symlink("/etc", filepath.Join(sb.Root, "link")); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Exec(context.Background(), ExecRequest{Sandbox: sb.Name, Argv: []string{"true"}, Workdir: "link"}); CodeOf(err) != CodeFileOperation {
		t.Fatalf("workdir through a symlink out: %v", err)
	}
}

// groupGone tells whether no live process is left in a process group
// (zombies waiting for a reaper do not count), polling for up to 5s.
func groupGone(pgid int) bool {
	return testwait.Until(5*time.Second, func() bool {
		return errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH) || !liveInGroup(pgid)
	})
}

func liveInGroup(pgid int) bool {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		data, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...
		rest := string(data[bytes.LastIndexByte(data, ')')+2:])
		f := strings.Fields(rest)
		if len(f) > 2 && f[2] == strconv.Itoa(pgid) && f[0] != "Z" {
			return true
		}
	}
	return false
}

func TestCancelKillsWholeGroup(t *testing.T) {
	l := newLocal(t)
	sb := acquire(t, l, Spec{InternetEnabled: true})
	ctx, cancel := context.WithCancel(context.Background())
	pidFile := filepath.Join(sb.Root, "pid")
	done := make(chan error, 1)
	go func() {
		_, err := l.Exec(ctx, ExecRequest{Sandbox: sb.Name, Argv: []string{"sleep 600 & echo $$ > pid; sleep 600; wait"}})
		done <- err
	}()
	pgid := waitPid(t, pidFile)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Exec did not return after cancel")
	}
	if !groupGone(pgid) {
		t.Fatalf("process group %d survived the cancel", pgid)
	}
}

func TestTimeoutAndLeftoversKilled(t *testing.T) {
	l := newLocal(t)
	sb := acquire(t, l, Spec{InternetEnabled: true})
	res, err := l.Exec(context.Background(), ExecRequest{Sandbox: sb.Name, Argv: []string{"sleep 600"}, Timeout: 200 * time.Millisecond})
	if err != nil || !res.TimedOut {
		t.Fatalf("timeout: %+v %v", res, err)
	}
	// A background child of a command that exits is killed with its group.
	if _, err := l.Exec(context.Background(), ExecRequest{Sandbox: sb.Name, Argv: []string{"sleep 600 & echo $$ > pid2"}}); err != nil {
		t.Fatal(err)
	}
	pgid := waitPid(t, filepath.Join(sb.Root, "pid2"))
	if !groupGone(pgid) {
		t.Fatalf("background child of group %d survived its step", pgid)
	}
}

// waitPid waits for a pid to be written to path and returns it.
func waitPid(t *testing.T, path string) int {
	t.Helper()
	var n int
	if !testwait.Until(10*time.Second, func() bool {
		data, _ := os.ReadFile(path) // a missing file reads as no pid yet
		var err error
		n, err = strconv.Atoi(string(bytes.TrimSpace(data)))
		return err == nil
	}) {
		t.Fatalf("no pid in %s", path)
	}
	return n
}

func TestInternetDisabledUsesNetworkNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIPPING: network namespaces need root")
	}
	l := newLocal(t)
	sb := acquire(t, l, Spec{Mode: "provision", Name: "offline", InternetEnabled: false})
	var out bytes.Buffer
	if _, err := l.Exec(context.Background(), ExecRequest{Sandbox: sb.Name, Argv: []string{"cat", "/proc/net/dev"}, Stdout: &out}); err != nil {
		t.Fatal(err)
	}
	var ifaces []string
	for _, line := range strings.Split(out.String(), "\n")[2:] {
		if name, _, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			ifaces = append(ifaces, name)
		}
	}
	if len(ifaces) != 1 || ifaces[0] != "lo" {
		t.Fatalf("interfaces in the sandbox: %v, want only lo", ifaces)
	}
}

func TestSetupSnapshotRestorePauseDelete(t *testing.T) {
	l := newLocal(t)
	ctx := context.Background()
	sb := acquire(t, l, Spec{Mode: "provision", Name: "src", InternetEnabled: true,
		SetupScripts: []manifests.SetupScript{{Name: "layout", Script: "mkdir -p data && echo v1 > data/file"}}})
	if _, err := l.Snapshot(ctx, sb.Name, "snap1"); err != nil {
		t.Fatal(err)
	}
	restored := acquire(t, l, Spec{Mode: "provision", Name: "copy", SnapshotName: "snap1", InternetEnabled: true})
	if data, err := os.ReadFile(filepath.Join(restored.Root, "data/file")); err != nil || string(data) != "v1\n" {
		t.Fatalf("restored file: %q %v", data, err)
	}
	if _, err := l.Acquire(ctx, Spec{Mode: "provision", Name: "bad", InternetEnabled: true,
		SetupScripts: []manifests.SetupScript{{Script: "exit 7"}}}); CodeOf(err) != CodeProvisioningFailed {
		t.Fatalf("failing setup script: %v", err)
	}
	if _, err := l.Get(ctx, "bad"); CodeOf(err) != CodeNotFound {
		t.Fatal("a failed provision left its sandbox behind")
	}
	if err := l.Pause(ctx, "copy"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Exec(ctx, ExecRequest{Sandbox: "copy", Argv: []string{"true"}}); CodeOf(err) != CodeInvalidState {
		t.Fatalf("exec in a paused sandbox: %v", err)
	}
	if err := l.Resume(ctx, "copy"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Exec(ctx, ExecRequest{Sandbox: "copy", Argv: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	if err := l.Delete(ctx, "copy"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(restored.Root); !os.IsNotExist(err) {
		t.Fatal("deleted sandbox still on disk")
	}
}

func TestPauseStopsRunningProcesses(t *testing.T) {
	l := newLocal(t)
	ctx := context.Background()
	sb := acquire(t, l, Spec{Mode: "provision", Name: "busy", InternetEnabled: true, Lifecycle: &manifests.Lifecycle{AutoResume: "on_activity"}})
	counter := filepath.Join(sb.Root, "n")
	stepCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	defer func() { cancel(); <-done }()
	go func() {
		defer close(done)
		_, _ = l.Exec(stepCtx, ExecRequest{Sandbox: sb.Name, Argv: []string{"i=0; while true; do i=$((i+1)); echo $i > n; sleep 0.02; done"}})
	}()
	waitPid(t, counter)
	if err := l.Pause(ctx, sb.Name); err != nil {
		t.Fatal(err)
	}
	// The loop writes every 20ms: a stop has taken effect once the counter
	// holds still for 100ms; then it must not move for 300ms more (the
	// window is what is tested).
	var a []byte
	if !testwait.Until(5*time.Second, func() bool {
		prev, _ := os.ReadFile(counter)
		time.Sleep(100 * time.Millisecond)
		a, _ = os.ReadFile(counter)
		return string(a) == string(prev)
	}) {
		t.Fatal("the counter kept moving after the pause")
	}
	time.Sleep(300 * time.Millisecond)
	b, _ := os.ReadFile(counter)
	if string(a) != string(b) {
		t.Fatalf("counter moved while paused: %q -> %q", a, b)
	}
	if err := l.Resume(ctx, sb.Name); err != nil {
		t.Fatal(err)
	}
	if !testwait.Until(5*time.Second, func() bool {
		c, _ := os.ReadFile(counter)
		return string(c) != string(b)
	}) {
		t.Fatal("counter did not move after resume")
	}
}

func TestReapLifecycle(t *testing.T) {
	l := newLocal(t)
	ctx := context.Background()
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := base
	l.Now = func() time.Time { return clock }
	secs := func(n int) *int { return &n }
	acquire(t, l, Spec{Mode: "provision", Name: "idle", InternetEnabled: true, Lifecycle: &manifests.Lifecycle{PauseAfterIdle: secs(60), DeleteAfter: secs(600)}})
	acquire(t, l, Spec{Mode: "provision", Name: "old", InternetEnabled: true, Lifecycle: &manifests.Lifecycle{PauseAfter: secs(120)}})
	acquire(t, l, Spec{Mode: "provision", Name: "forever", InternetEnabled: true})

	rep, err := l.Reap(ctx, base.Add(30*time.Second))
	if err != nil || len(rep.Paused)+len(rep.Deleted) != 0 {
		t.Fatalf("nothing is due at 30s: %+v %v", rep, err)
	}
	rep, _ = l.Reap(ctx, base.Add(90*time.Second))
	if len(rep.Paused) != 1 || rep.Paused[0] != "idle" {
		t.Fatalf("at 90s: %+v, want idle paused", rep)
	}
	rep, _ = l.Reap(ctx, base.Add(150*time.Second))
	if len(rep.Paused) != 1 || rep.Paused[0] != "old" {
		t.Fatalf("at 150s: %+v, want old paused", rep)
	}
	rep, _ = l.Reap(ctx, base.Add(700*time.Second))
	if len(rep.Deleted) != 1 || rep.Deleted[0] != "idle" {
		t.Fatalf("at 700s: %+v, want idle deleted", rep)
	}
	if sb, err := l.Get(ctx, "forever"); err != nil || sb.State != StateRunning {
		t.Fatalf("a sandbox without lifecycle was touched: %+v %v", sb, err)
	}
}

func TestMemoryLimitEnforced(t *testing.T) {
	if _, err := os.Stat("/sys/fs/cgroup/memory"); err != nil || os.Geteuid() != 0 {
		t.Skip("SKIPPING: no writable cgroup v1 memory controller")
	}
	l := newLocal(t)
	sb := acquire(t, l, Spec{Mode: "provision", Name: "small", InternetEnabled: true, MemoryMB: 32, Vcpus: 1})
	if !strings.HasPrefix(sb.LimitsApplied["memory_mb"], "enforced") || !strings.HasPrefix(sb.LimitsApplied["vcpus"], "enforced") {
		t.Fatalf("limits not applied: %v", sb.LimitsApplied)
	}
	// Holding 100 MB in a shell variable must be killed by the 32 MB limit.
	res, err := l.Exec(context.Background(), ExecRequest{Sandbox: sb.Name, Argv: []string{`x=$(head -c 100000000 /dev/zero | tr '\0' a); echo ${#x}`}})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode == 0 {
		t.Fatalf("a 100 MB allocation succeeded under a 32 MB limit")
	}
	if err := l.Delete(context.Background(), sb.Name); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cgroupDir("memory", sb.CgroupName)); !os.IsNotExist(err) {
		t.Fatalf("cgroup left after delete: %v", err)
	}
}
