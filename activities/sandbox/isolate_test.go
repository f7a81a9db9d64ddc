package sandbox

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/linefactory/linefactory/activities/sandbox/sandboxtest"
	"github.com/linefactory/linefactory/internal/testwait"
)

// newIsolated is a driver with bwrap isolation; it skips (loudly) only
// where the kernel forbids the namespaces, and fails when a tool is missing.
func newIsolated(t *testing.T) *Local {
	t.Helper()
	if err := CheckIsolation(); err != nil {
		if strings.Contains(err.Error(), "not installed") {
			t.Fatalf("isolation tools missing: %v", err)
		}
		t.Skipf("SKIPPING: this host cannot isolate sandboxes: %v", err)
	}
	l, err := NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		entries, _ := os.ReadDir(filepath.Join(l.root, "sandboxes"))
		for _, e := range entries {
			_ = l.Delete(context.Background(), e.Name())
		}
	})
	return l
}

func run(t *testing.T, l *Local, req ExecRequest) (ExecResult, string) {
	t.Helper()
	var out bytes.Buffer
	req.Stdout, req.Stderr = &out, &out
	t.Logf("attack/command: %q", req.Argv)
	res, err := l.Exec(context.Background(), req)
	if err != nil {
		t.Fatalf("exec %q: %v", req.Argv, err)
	}
	return res, out.String()
}

func TestIsolatedView(t *testing.T) {
	l := newIsolated(t)
	sb := acquire(t, l, Spec{Name: "view", InternetEnabled: false})
	other := acquire(t, l, Spec{Name: "other", InternetEnabled: true})
	if err := os.WriteFile(filepath.Join(other.Root, "secret"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, out := run(t, l, ExecRequest{Sandbox: sb.Name, Argv: []string{`id -un; id -u; pwd; ls /proc | grep -c '^[0-9]'; ` +
		`ls /run /var/run 2>&1; ls ` + l.root + ` 2>&1; cat ` + filepath.Join(other.Root, "secret") + ` 2>&1; touch mine`}})
	lines := strings.Split(out, "\n")
	if res.ExitCode != 0 || len(lines) < 4 || lines[0] != "sandbox" || lines[1] == "0" || lines[2] != "/workspace" {
		t.Fatalf("exit %d, output:\n%s", res.ExitCode, out)
	}
	if n, _ := strconv.Atoi(lines[3]); n > 5 {
		t.Fatalf("the step sees %d processes: it is not in its own PID namespace\n%s", n, out)
	}
	if strings.Count(out, "No such file or directory") < 4 {
		t.Fatalf("the step sees /run, the data dir or another sandbox:\n%s", out)
	}
	if st, err := os.Stat(filepath.Join(sb.Root, "mine")); err != nil || st.Sys() == nil {
		t.Fatal(err)
	}
	if got := fileUID(t, filepath.Join(sb.Root, "mine")); got != sb.HostUID || got == 0 {
		t.Fatalf("the step's file belongs to host uid %d, want the sandbox's %d", got, sb.HostUID)
	}
	_, out = run(t, l, ExecRequest{Sandbox: sb.Name, User: "root", Argv: []string{"id -u"}})
	if strings.TrimSpace(out) != "0" {
		t.Fatalf("user root: %q", out)
	}
}

func TestIsolatedNetwork(t *testing.T) {
	l := newIsolated(t)
	_, port, _ := net.SplitHostPort(sandboxtest.Listen(t, "tcp", "127.0.0.1:0", "HOST-LISTENER"))
	for _, online := range []bool{false, true} {
		sb := acquire(t, l, Spec{Name: "net" + strconv.FormatBool(online), InternetEnabled: online})
		probe := sandboxtest.Script(sandboxtest.ReachHost, map[string]any{"addrs": []string{"127.0.0.1:" + port, "10.0.2.2:" + port}, "sockets": []string{}})
		_, out := run(t, l, ExecRequest{Sandbox: sb.Name, Argv: []string{probe}})
		if strings.Contains(out, "CONNECTED") || strings.Contains(out, "HOST-LISTENER") {
			t.Fatalf("online=%v: the step reached the host's loopback listener: %s", online, out)
		}
	}
}

func TestIsolatedStopKillsEverything(t *testing.T) {
	l := newIsolated(t)
	sb := acquire(t, l, Spec{Name: "stop", MemoryMB: 64, InternetEnabled: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	marker := "sleep " + strconv.Itoa(1000+os.Getpid()%100000) // unique on this host
	escape := sandboxtest.Script(sandboxtest.SetsidEscape, map[string]any{"marker": marker, "sleep": 612})
	t.Logf("attack/command: %s", escape)
	_, err := l.Exec(ctx, ExecRequest{Sandbox: sb.Name, Argv: []string{escape}})
	if err == nil {
		t.Fatal("the stopped command did not report its stop")
	}
	if pids := hostPids(marker); len(pids) > 0 {
		t.Fatalf("a setsid process survived the stop: %v", pids)
	}
	res, out := run(t, l, ExecRequest{Sandbox: sb.Name, Argv: []string{sandboxtest.Script(sandboxtest.GrandchildAlloc, nil)}})
	if res.ExitCode == 0 || strings.Contains(out, strconv.Itoa(300<<20)) {
		t.Fatalf("a grandchild allocated 300 MB in a 64 MB sandbox: exit %d %s", res.ExitCode, out)
	}
	if !testwait.Until(cgroupLinger+10*time.Second, func() bool { return len(ourGroups(l.groupPrefix)) == 0 }) {
		t.Fatalf("cgroups left after the commands ended: %v", ourGroups(l.groupPrefix))
	}
}

// hostPids lists host processes whose command line is cmdline.
func hostPids(cmdline string) []int {
	return sandboxtest.Processes(func(c string) bool { return c == cmdline })
}

func fileUID(t *testing.T, path string) int {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return int(st.Sys().(*syscall.Stat_t).Uid)
}

func TestIsolatedReadOnlyHarnessFile(t *testing.T) {
	l := newIsolated(t)
	sb := acquire(t, l, Spec{Name: "harness"})
	script := filepath.Join(t.TempDir(), "harness.sh") // under a 0700 directory
	if err := os.WriteFile(script, []byte("echo harness ran\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, out := run(t, l, ExecRequest{Sandbox: sb.Name, ReadOnly: []string{script}, Argv: []string{"sh", script}})
	if res.ExitCode != 0 || !strings.Contains(out, "harness ran") {
		t.Fatalf("exit %d: %s", res.ExitCode, out)
	}
	res, out = run(t, l, ExecRequest{Sandbox: sb.Name, ReadOnly: []string{script}, Argv: []string{"sh", "-c", "echo x >> " + script}})
	if res.ExitCode == 0 {
		t.Fatalf("the harness file is writable: %s", out)
	}
}

// TestIsolatedNoCapabilities: a step, as the default user or as root of its
// user namespace, has no capability and no way to gain one by exec, and
// can neither mount nor write the system view.
func TestIsolatedNoCapabilities(t *testing.T) {
	l := newIsolated(t)
	sb := acquire(t, l, Spec{Name: "caps"})
	for _, user := range []string{"", "root"} {
		res, out := run(t, l, ExecRequest{Sandbox: sb.Name, User: user, Argv: []string{
			`grep -E '^(CapInh|CapPrm|CapEff|CapAmb|NoNewPrivs):' /proc/self/status; ` +
				`mount -t tmpfs x /workspace 2>/dev/null && echo MOUNTED; touch /etc/x 2>/dev/null && echo WROTE-ETC; ` +
				`touch /x 2>/dev/null && echo WROTE-ROOT; touch /dev/x 2>/dev/null && echo WROTE-DEV; ` +
				`echo x >/dev/null || echo NO-DEV-NULL; true`}})
		if res.ExitCode != 0 || strings.Contains(out, "MOUNTED") || strings.Contains(out, "WROTE-") || strings.Contains(out, "NO-DEV") {
			t.Fatalf("user %q: exit %d\n%s", user, res.ExitCode, out)
		}
		for _, want := range []string{"CapInh:\t0000000000000000", "CapPrm:\t0000000000000000", "CapEff:\t0000000000000000",
			"CapAmb:\t0000000000000000", "NoNewPrivs:\t1"} {
			if !strings.Contains(out, want) {
				t.Fatalf("user %q: %q missing:\n%s", user, want, out)
			}
		}
	}
}

// TestIsolatedBind: a host directory under a private (0700) directory is
// seen read-write where the request says, its host path in the command
// rewritten, and what the step writes there belongs to the sandbox's uid.
func TestIsolatedBind(t *testing.T) {
	l := newIsolated(t)
	sb := acquire(t, l, Spec{Name: "bind"})
	host := filepath.Join(t.TempDir(), "artifacts")
	if err := os.Mkdir(host, 0o755); err != nil {
		t.Fatal(err)
	}
	res, out := run(t, l, ExecRequest{Sandbox: sb.Name, Binds: map[string]string{host: "/artifacts"},
		Argv: []string{"echo made > " + filepath.Join(host, "out") + "; pwd; ls -d /artifacts"}})
	if res.ExitCode != 0 || !strings.Contains(out, "/artifacts") {
		t.Fatalf("exit %d: %s", res.ExitCode, out)
	}
	if data, err := os.ReadFile(filepath.Join(host, "out")); err != nil || string(data) != "made\n" {
		t.Fatalf("the bound directory's file: %q %v", data, err)
	}
	if got := fileUID(t, filepath.Join(host, "out")); got != sb.HostUID {
		t.Fatalf("the step's file belongs to host uid %d, want the sandbox's %d", got, sb.HostUID)
	}
}

// TestIsolatedShimJoin: where the command cannot be started traced (cgroup
// v1), the shim joins its groups as root and the command still runs as the
// sandbox's unprivileged user, without capabilities.
func TestIsolatedShimJoin(t *testing.T) {
	l := newIsolated(t)
	sb := acquire(t, l, Spec{Name: "shim"})
	shimOnly = true
	defer func() { shimOnly = false }()
	res, out := run(t, l, ExecRequest{Sandbox: sb.Name, Argv: []string{"id -u; grep -E '^(CapEff|NoNewPrivs):' /proc/self/status; touch mine"}})
	if res.ExitCode != 0 || !strings.HasPrefix(out, "1000\n") || !strings.Contains(out, "CapEff:\t0000000000000000") || !strings.Contains(out, "NoNewPrivs:\t1") {
		t.Fatalf("exit %d:\n%s", res.ExitCode, out)
	}
	if got := fileUID(t, filepath.Join(sb.Root, "mine")); got != sb.HostUID {
		t.Fatalf("the step's file belongs to host uid %d, want the sandbox's %d", got, sb.HostUID)
	}
}

// TestIsolatedDataDirUnderStage: a data directory under the directory the
// staging tmpfs covers (stage.go) still gives the command its workspace.
func TestIsolatedDataDirUnderStage(t *testing.T) {
	if err := CheckIsolation(); err != nil {
		t.Skipf("SKIPPING: this host cannot isolate sandboxes: %v", err)
	}
	dir, err := os.MkdirTemp(stageDir(), "linefactory-test-")
	if err != nil {
		t.Skipf("SKIPPING: cannot make a directory under %s: %v", stageDir(), err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	l, err := NewLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	sb := acquire(t, l, Spec{Name: "understage"})
	t.Cleanup(func() { _ = l.Delete(context.Background(), sb.Name) })
	if err := os.WriteFile(filepath.Join(sb.Root, "given"), []byte("from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(sb.Root, "given"), 0o644); err != nil { // whatever the umask
		t.Fatal(err)
	}
	res, out := run(t, l, ExecRequest{Sandbox: sb.Name, Argv: []string{"cat given; touch made"}})
	if res.ExitCode != 0 || out != "from the host\n" {
		t.Fatalf("exit %d: %q", res.ExitCode, out)
	}
	if _, err := os.Stat(filepath.Join(sb.Root, "made")); err != nil {
		t.Fatal(err)
	}
}

// TestIsolatedDevWithoutMknod: where factoryd may not make device nodes,
// the sandbox's /dev binds the host's, and they work.
func TestIsolatedDevWithoutMknod(t *testing.T) {
	l := newIsolated(t)
	sb := acquire(t, l, Spec{Name: "devbind"})
	devBindOnly = true
	defer func() { devBindOnly = false }()
	res, out := run(t, l, ExecRequest{Sandbox: sb.Name, Argv: []string{
		"echo x >/dev/null && head -c 3 /dev/zero | wc -c && head -c 3 /dev/urandom | wc -c; touch /dev/x 2>/dev/null && echo WROTE-DEV; true"}})
	if res.ExitCode != 0 || out != "3\n3\n" {
		t.Fatalf("exit %d: %q", res.ExitCode, out)
	}
}

// A sandbox made without isolation has no /tmp of its own (its steps use the
// host's); after a restart with isolation its steps get one, owned by the
// step user, and deleting the sandbox removes everything either way.
func TestTmpMadeWhenIsolationComesLater(t *testing.T) {
	iso := newIsolated(t)
	root := iso.root
	plain, err := NewLocalWith(root, Options{Isolation: IsolationNone})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, name := range []string{"later", "never"} {
		if _, err := plain.Acquire(ctx, Spec{Mode: "provision", Name: name, InternetEnabled: true}); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(plain.tmpDir(name)); !os.IsNotExist(err) {
			t.Fatalf("sandbox %s made without isolation has a /tmp dir: %v", name, err)
		}
	}
	if err := plain.Delete(ctx, "never"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(plain.dir("never")); !os.IsNotExist(err) {
		t.Fatalf("deleted sandbox left %s: %v", plain.dir("never"), err)
	}
	plain.Close()

	res, out := run(t, iso, ExecRequest{Sandbox: "later", Argv: []string{"/bin/sh", "-c", "echo hi > /tmp/f && cat /tmp/f"}})
	if res.ExitCode != 0 || strings.TrimSpace(out) != "hi" {
		t.Fatalf("step writing /tmp after isolation came: exit %d, %q", res.ExitCode, out)
	}
	fi, err := os.Stat(iso.tmpDir("later"))
	if err != nil {
		t.Fatal(err)
	}
	if sb, _ := iso.load("later"); sb.HostUID > 0 && int(fi.Sys().(*syscall.Stat_t).Uid) != sb.HostUID {
		t.Fatalf("/tmp owned by %d, want the sandbox's user %d", fi.Sys().(*syscall.Stat_t).Uid, sb.HostUID)
	}
	if err := iso.Delete(ctx, "later"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(iso.dir("later")); !os.IsNotExist(err) {
		t.Fatalf("deleted sandbox left %s: %v", iso.dir("later"), err)
	}
}
