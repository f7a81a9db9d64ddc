package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// holderOf waits until the sandbox has a holder (made beside a command
// told another follows) and returns it.
func holderOf(t *testing.T, l *Local, name string) *holder {
	t.Helper()
	for deadline := time.Now().Add(holderReady + time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		l.hmu.Lock()
		h := l.holders[name]
		l.hmu.Unlock()
		if h != nil {
			return h
		}
	}
	t.Fatal("no holder was made")
	return nil
}

// nsIDs are a holder's namespaces as /proc/<pid>/ns links read them.
func (h *holder) nsIDs(t *testing.T) []string {
	var ids []string
	for i, ns := range holderNamespaces {
		var st syscall.Stat_t
		if err := syscall.Fstat(int(h.ns[i].Fd()), &st); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, fmt.Sprintf("%s:[%d]", ns[1], st.Ino))
	}
	return ids
}

// probe is what a command sees of itself: its namespaces, identity,
// capabilities, directory, host name, descriptors and processes.
const probe = `for n in user mnt pid ipc uts cgroup; do readlink /proc/self/ns/$n; done
grep -E '^(Uid|Gid|Groups|CapInh|CapPrm|CapEff|CapAmb|NoNewPrivs):' /proc/self/status | tr -s '\t ' ' '
pwd; hostname; ls /proc/self/fd | wc -l
touch /usr/x 2>/dev/null && echo usr-writable; touch /workspace/w && echo workspace-writable`

func runProbe(t *testing.T, l *Local, sb Sandbox, req ExecRequest) []string {
	t.Helper()
	var out, errb bytes.Buffer
	req.Sandbox, req.Argv, req.Stdout, req.Stderr = sb.Name, []string{"sh", "-c", probe}, &out, &errb
	if res, err := l.Exec(context.Background(), req); err != nil || res.ExitCode != 0 {
		t.Fatalf("%+v %v: %s", res, err, errb.String())
	}
	return strings.Split(strings.TrimSpace(out.String()), "\n")
}

// withHolder is an isolated driver and a sandbox of spec whose holder is
// ready (made beside a first command told another follows), and the
// holder's namespaces as a probe names them (nsOf).
func withHolder(t *testing.T, spec Spec) (*Local, Sandbox, *holder, string) {
	t.Helper()
	needLaunchers(t)
	l := newIsolated(t)
	sb := acquire(t, l, spec)
	runProbe(t, l, sb, ExecRequest{NextSoon: true})
	h := holderOf(t, l, sb.Name)
	return l, sb, h, strings.Join(h.nsIDs(t), " ")
}

// nsOf is the namespaces a probe's output names.
func nsOf(probe []string) string { return strings.Join(probe[:6], " ") }

func TestHolderRunsTheNextCommandsInItsNamespaces(t *testing.T) {
	needLaunchers(t)
	for _, online := range []bool{false, true} {
		t.Run(fmt.Sprintf("online %v", online), func(t *testing.T) {
			l := newIsolated(t)
			sb := acquire(t, l, Spec{Name: "steps", InternetEnabled: online})
			own := runProbe(t, l, sb, ExecRequest{NextSoon: true}) // a bwrap of its own
			h := holderOf(t, l, sb.Name)
			ids := h.nsIDs(t)
			for i := 0; i < 3; i++ {
				got := runProbe(t, l, sb, ExecRequest{NextSoon: i < 2})
				if nsOf(got) != strings.Join(ids, " ") {
					t.Fatalf("command %d ran in %v, want the holder's %v", i, got[:6], ids)
				}
				// As under a bwrap of its own: the step's user, no
				// capability, no-new-privileges, /workspace, a read-only
				// system, no descriptor but its three (and ls's own).
				for j := 6; j < len(own); j++ {
					want := own[j]
					if strings.HasPrefix(want, "NoNewPrivs") {
						want = "NoNewPrivs: 1"
					}
					if got[j] != want {
						t.Fatalf("command %d line %d: %q, a bwrap of its own %q", i, j, got[j], want)
					}
				}
			}
			if nsOf(own) == strings.Join(ids, " ") {
				t.Fatal("the first command ran in the holder's namespaces")
			}
			if !strings.Contains(strings.Join(own, "\n"), "CapEff: 0000000000000000") || !strings.Contains(strings.Join(own, "\n"), "workspace-writable") || strings.Contains(strings.Join(own, "\n"), "usr-writable") {
				t.Fatalf("a bwrap of its own: %q", own)
			}
		})
	}
}

func TestHolderCommandsExitAndLeaveNothing(t *testing.T) {
	l, sb, h, _ := withHolder(t, Spec{Name: "steps"})
	run := func(script string) (ExecResult, string) { return runCapture(t, l, sb, script) }
	if res, _ := run("exit 7"); res.ExitCode != 7 {
		t.Fatalf("exit 7: %+v", res)
	}
	if res, _ := run("kill -9 $$"); res.ExitCode != 137 {
		t.Fatalf("kill -9: %+v", res)
	}
	// A process left behind is killed with the command's group: the next
	// command sees only the holder (holder-sleep) and its own.
	if res, _ := run("sleep 300 & echo started"); res.ExitCode != 0 {
		t.Fatalf("background: %+v", res)
	}
	_, ps := run(`for p in /proc/[0-9]*; do cat $p/comm; done | sort | tr '\n' ' '`)
	if strings.Count(ps, "sleep") != 1 {
		t.Fatalf("processes seen: %q, want one sleep (the holder's holder-sleep)", ps)
	}
	l.hmu.Lock()
	same := l.holders[sb.Name] == h
	l.hmu.Unlock()
	if !same {
		t.Fatal("the holder changed")
	}
	// A timeout stops an entered command too.
	res, err := l.Exec(context.Background(), ExecRequest{Sandbox: sb.Name, Argv: []string{"sleep", "30"}, Timeout: 300 * time.Millisecond, NextSoon: true})
	if err != nil || !res.TimedOut {
		t.Fatalf("timeout: %+v %v", res, err)
	}
}

func TestHolderKilledByAStepIsNotUsed(t *testing.T) {
	l, sb, h, old := withHolder(t, Spec{Name: "steps"})
	// The holder is the PID namespace's init: a step's signals do not
	// reach it, and it cannot be traced or read (not dumpable).
	res, out := runCapture(t, l, sb, `kill -9 1; kill -STOP 1; cat /proc/1/environ >/dev/null 2>&1 && echo environ-readable; cat /proc/1/comm`)
	if res.ExitCode != 0 || strings.Contains(out, "environ-readable") || strings.TrimSpace(out) != "holder-sleep" {
		t.Fatalf("a step at the holder: %+v %q", res, out)
	}
	if got := runProbe(t, l, sb, ExecRequest{NextSoon: true}); nsOf(got) != old {
		t.Fatalf("after a step's kill the holder changed: %v", got[:6])
	}
	// Orphans it inherits are reaped: no zombie stays.
	_, out = runCapture(t, l, sb, `for i in 1 2 3 4 5 6 7 8 9 10; do (sleep 0.05 &); done; sleep 0.5; grep -l '^State:.Z' /proc/[0-9]*/status 2>/dev/null | wc -l`)
	if strings.TrimSpace(out) != "0" {
		t.Fatalf("zombies left in the holder's PID namespace: %q", out)
	}
	// Ended from outside (as a worker's kill would), it is never entered
	// again: the next commands start their own bwrap and a new holder.
	_ = syscall.Kill(h.r.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-h.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the holder did not end")
	}
	for i := 0; i < 5; i++ {
		got := runProbe(t, l, sb, ExecRequest{NextSoon: true})
		if nsOf(got) == old {
			t.Fatalf("command %d ran in the ended holder's namespaces", i)
		}
	}
	if h2 := holderOf(t, l, sb.Name); h2 == h {
		t.Fatal("the ended holder is still the sandbox's")
	}
}

func TestHolderEndsWithTheSandboxsGroups(t *testing.T) {
	needLaunchers(t)
	l := newIsolated(t)
	for _, del := range []bool{true, false} {
		sb := acquire(t, l, Spec{Name: fmt.Sprintf("steps-%v", del)})
		runProbe(t, l, sb, ExecRequest{NextSoon: true})
		h := holderOf(t, l, sb.Name)
		dirs := h.r.group.dirs
		if del {
			if err := l.Delete(context.Background(), sb.Name); err != nil {
				t.Fatal(err)
			}
		} else {
			runProbe(t, l, sb, ExecRequest{}) // the last: the groups linger, then go
		}
		select {
		case <-h.done:
		case <-time.After(cgroupLinger + 5*time.Second):
			t.Fatalf("delete %v: the holder did not end", del)
		}
		// Removed by whatever ended it (Delete, or the groups' removal
		// after cgroupLinger), which the holder's end does not wait for.
		for deadline := time.Now().Add(killDeadline); ; time.Sleep(10 * time.Millisecond) {
			left := ""
			for _, d := range dirs {
				if _, err := os.Stat(d); err == nil {
					left = d
				}
			}
			l.hmu.Lock()
			n := len(l.holders)
			l.hmu.Unlock()
			if left == "" && n == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("delete %v: the holder's group %q is left, %d holders kept", del, left, n)
			}
		}
	}
}

func TestCommandsWithOtherMountsStartTheirOwnBwrap(t *testing.T) {
	l, sb, _, ids := withHolder(t, Spec{Name: "steps"})
	file := filepath.Join(t.TempDir(), "harness.sh")
	if err := os.WriteFile(file, []byte("echo hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, req := range map[string]ExecRequest{"read-only file": {ReadOnly: []string{file}, NextSoon: true}, "another user": {User: "4242", NextSoon: true}, "root": {User: "root", NextSoon: true}} {
		if got := runProbe(t, l, sb, req); nsOf(got) == ids {
			t.Fatalf("%s: ran in the holder's namespaces", name)
		}
	}
}

// Commands entered in the holder change nothing of their launcher's thread
// but its no-new-privileges: the group keeps it for the next command, as
// without isolation, and retires it after the last.
func TestHolderCommandsKeepTheirLauncher(t *testing.T) {
	l, sb, _, _ := withHolder(t, Spec{Name: "steps"})
	kept := func() []*launcher {
		l.cgmu.Lock()
		defer l.cgmu.Unlock()
		p := l.pools[sb.Name]
		if p == nil || len(p.free) != 1 {
			t.Fatal("no group kept")
		}
		return slices.Clone(p.free[0].lns)
	}
	runProbe(t, l, sb, ExecRequest{NextSoon: true})
	first := kept()
	if len(first) != 1 {
		t.Fatalf("%d launchers kept, want 1", len(first))
	}
	for i := 0; i < 3; i++ {
		runProbe(t, l, sb, ExecRequest{NextSoon: true})
		if now := kept(); len(now) != 1 || now[0] != first[0] {
			t.Fatalf("command %d: launchers %p, want the one kept (%p)", i, now, first[0])
		}
	}
	runProbe(t, l, sb, ExecRequest{})
	if n := len(kept()); n != 0 || !first[0].ended {
		t.Fatalf("after the last command: %d launchers, the kept one ended %v", n, first[0].ended)
	}
}

// A step's variables never reach a process that runs as root on the host:
// nsenter (entering the holder) and, where the command cannot be started
// traced, the shim and setpriv get an environment of their own. The probe:
// LD_PRELOAD naming a host file only root can read, which is not a
// library; a root process loading it would say so ("invalid ELF header"),
// the step's own processes cannot see it.
func TestStepVariablesNeverReachRootOnTheHost(t *testing.T) {
	needLaunchers(t)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	evil := filepath.Join(dir, "evil.so")
	if err := os.WriteFile(evil, []byte("this is not a shared object, but a root process would try it\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"LD_PRELOAD": evil, "MINE": "kept"}
	check := func(name string, l *Local, sb Sandbox, nextSoon bool) {
		t.Helper()
		var out, errb bytes.Buffer
		res, err := l.Exec(context.Background(), ExecRequest{Sandbox: sb.Name, Argv: []string{"sh", "-c", `echo "$MINE $LD_PRELOAD"`}, Env: env, Stdout: &out, Stderr: &errb, NextSoon: nextSoon})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%s: %+v %v: %s", name, res, err, errb.String())
		}
		if strings.Contains(errb.String(), "ELF") || strings.Contains(errb.String(), "too short") {
			t.Fatalf("%s: a process that could read %s tried to load it: %s", name, evil, errb.String())
		}
		if got := strings.TrimSpace(out.String()); got != "kept "+evil {
			t.Fatalf("%s: the step's environment: %q", name, got)
		}
	}
	l := newIsolated(t)
	sb := acquire(t, l, Spec{Name: "env"})
	check("first", l, sb, true)
	holderOf(t, l, sb.Name)
	check("entered", l, sb, true)
	// Only factoryd's variables and SVC_* ones: nsenter passes them on.
	var out bytes.Buffer
	res, err := l.Exec(context.Background(), ExecRequest{Sandbox: sb.Name, Argv: []string{"sh", "-c", `echo "$SVC_MINE $HOME $PATH"; readlink /proc/self/ns/pid`}, Env: map[string]string{"SVC_MINE": "kept"}, Stdout: &out, NextSoon: true})
	if want := "kept " + insideRoot + " "; err != nil || res.ExitCode != 0 || !strings.HasPrefix(out.String(), want) || !strings.Contains(strings.Join(holderOf(t, l, sb.Name).nsIDs(t), " "), strings.Fields(out.String())[3]) {
		t.Fatalf("SVC_ variables only: %+v %v %q", res, err, out.String())
	}

	shimOnly = true
	defer func() { shimOnly = false }()
	l2 := newIsolated(t)
	sb2 := acquire(t, l2, Spec{Name: "env-shim"})
	for i := 0; i < 3; i++ { // a bwrap through the shim, then entered through it
		check(fmt.Sprintf("shim %d", i), l2, sb2, true)
		time.Sleep(30 * time.Millisecond)
	}
}

// An entered command's output file ($SVC_OUTPUT, in the sandbox's /tmp) and
// workspace files reach the host as a bwrap's do, in the step's working
// directory.
func TestHolderCommandsWriteOutputsAndFiles(t *testing.T) {
	l, sb, _, ids := withHolder(t, Spec{Name: "outputs"})
	if err := os.MkdirAll(filepath.Join(sb.Root, "sub"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(sb.Root, "sub"), sb.HostUID, sb.HostUID); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "svc_output.run.1")
	var stdout, stderr bytes.Buffer
	res, err := l.Exec(context.Background(), ExecRequest{Sandbox: sb.Name, Workdir: "sub", NextSoon: true,
		Argv:   []string{"sh", "-c", `readlink /proc/self/ns/pid /proc/self/ns/mnt; pwd; echo "n=4" > "$SVC_OUTPUT"; echo made > here`},
		Env:    map[string]string{OutputEnv: out},
		Stdout: &stdout, Stderr: &stderr})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%+v %v: %s", res, err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) != 3 || !strings.Contains(ids, lines[0]) || !strings.Contains(ids, lines[1]) || lines[2] != insideRoot+"/sub" {
		t.Fatalf("not entered in %s, or not in its directory: %q", ids, lines)
	}
	if b, err := os.ReadFile(out); err != nil || string(b) != "n=4\n" {
		t.Fatalf("output file: %q %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(sb.Root, "sub", "here")); err != nil || string(b) != "made\n" {
		t.Fatalf("workspace file: %q %v", b, err)
	}
	if got := fileUID(t, filepath.Join(sb.Root, "sub", "here")); got != sb.HostUID {
		t.Fatalf("the step's file belongs to host uid %d, want the sandbox's %d", got, sb.HostUID)
	}
}

// Root of the sandbox (a step's user "root") never enters a holder: nsenter
// would leave it the user namespace's capabilities, which bwrap drops.
func TestRootStepsNeverEnterAHolder(t *testing.T) {
	needLaunchers(t)
	l := newIsolated(t)
	sb := acquire(t, l, Spec{Name: "root"})
	for i := 0; i < 4; i++ {
		got := strings.Join(runProbe(t, l, sb, ExecRequest{NextSoon: true, User: "root"}), "\n")
		if !strings.Contains(got, "Uid: 0 0 0 0") || !strings.Contains(got, "CapPrm: 0000000000000000") || !strings.Contains(got, "CapEff: 0000000000000000") {
			t.Fatalf("command %d as root: %s", i, got)
		}
		time.Sleep(20 * time.Millisecond) // time for a holder, were one made
	}
	l.hmu.Lock()
	n := len(l.holders) + len(l.holding)
	l.hmu.Unlock()
	if n != 0 {
		t.Fatalf("%d holders made for root's commands", n)
	}
}

// A stopped entered command ends with everything it started, and the
// holder serves the next; a paused sandbox freezes its holder with it, and
// the next command after the resume enters it again.
func TestHolderThroughStopAndPause(t *testing.T) {
	l, sb, _, ids := withHolder(t, Spec{Name: "stop"})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	t0 := time.Now()
	res, err := l.Exec(ctx, ExecRequest{Sandbox: sb.Name, Argv: []string{"sh", "-c", "sleep 60 & sleep 60"}, NextSoon: true})
	if err == nil && !res.Signaled {
		t.Fatalf("stopped: %+v %v", res, err)
	}
	if d := time.Since(t0); d > killGrace+2*time.Second {
		t.Fatalf("the stop took %v", d)
	}
	_, ps := runCapture(t, l, sb, `for p in /proc/[0-9]*; do cat $p/comm; done | sort | tr '\n' ' '`)
	if strings.Count(ps, "sleep") != 1 {
		t.Fatalf("after the stop: %q, want only the holder's holder-sleep", ps)
	}
	if err := l.Pause(context.Background(), sb.Name); err != nil {
		t.Fatal(err)
	}
	if err := l.Resume(context.Background(), sb.Name); err != nil {
		t.Fatal(err)
	}
	if got := runProbe(t, l, sb, ExecRequest{NextSoon: true}); nsOf(got) != ids {
		t.Fatalf("after pause and resume: %v, want the holder's %s", got[:6], ids)
	}
}

func runCapture(t *testing.T, l *Local, sb Sandbox, script string) (ExecResult, string) {
	t.Helper()
	var out bytes.Buffer
	res, err := l.Exec(context.Background(), ExecRequest{Sandbox: sb.Name, Argv: []string{"sh", "-c", script}, Stdout: &out, Stderr: &out, NextSoon: true})
	if err != nil {
		t.Fatal(err)
	}
	return res, out.String()
}

// The holder carries none of the variables of the step it was made beside:
// later steps, which see its processes, cannot read them in its environ.
func TestHolderKeepsNoStepVariables(t *testing.T) {
	needLaunchers(t)
	l := newIsolated(t)
	sb := acquire(t, l, Spec{Name: "secret"})
	if res, err := l.Exec(context.Background(), ExecRequest{Sandbox: sb.Name, Argv: []string{"true"}, Env: map[string]string{"STEP_SECRET": "s3cr3t", "SVC_PARAM_X": "p4ram"}, NextSoon: true}); err != nil || res.ExitCode != 0 {
		t.Fatalf("%+v %v", res, err)
	}
	holderOf(t, l, sb.Name)
	// A step cannot read it at all (the holder is not dumpable); factoryd,
	// as root, can.
	_, out := runCapture(t, l, sb, `tr '\0' '\n' < /proc/1/environ; echo end`)
	if !strings.Contains(out, "end") || !strings.Contains(out, "Permission denied") {
		t.Fatalf("a step reading the holder's environment: %q", out)
	}
	h := holderOf(t, l, sb.Name)
	kids, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", h.r.cmd.Process.Pid, h.r.cmd.Process.Pid))
	env, err := os.ReadFile("/proc/" + strings.TrimSpace(string(kids)) + "/environ")
	if err != nil || !strings.Contains(string(env), "SANDBOX_NAME=") || strings.Contains(string(env), "s3cr3t") || strings.Contains(string(env), "p4ram") {
		t.Fatalf("the holder's environment: %q %v", env, err)
	}
}

// Commands of a sandbox that run at once never share the holder's PID
// namespace (the same uid could signal or trace the other): while one is
// entered, another starts its own bwrap.
func TestConcurrentCommandsNeverShareTheHolder(t *testing.T) {
	l, sb, _, ids := withHolder(t, Spec{Name: "shared"})
	done := make(chan string, 1)
	go func() {
		var out bytes.Buffer
		_, _ = l.Exec(context.Background(), ExecRequest{Sandbox: sb.Name, Argv: []string{"sh", "-c", "readlink /proc/self/ns/pid; sleep 1"}, Stdout: &out, NextSoon: true})
		done <- strings.TrimSpace(out.String())
	}()
	time.Sleep(300 * time.Millisecond) // the first is running, entered
	second := runProbe(t, l, sb, ExecRequest{NextSoon: true})
	first := <-done
	if !strings.Contains(ids, first) {
		t.Fatalf("the first command ran in %s, not the holder's %s", first, ids)
	}
	if second[2] == first {
		t.Fatalf("two commands running at once shared the PID namespace %s", first)
	}
}
