package sandbox

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/linefactory/linefactory/internal/testwait"
)

// needLaunchers skips a test on hosts where commands are not started by
// launchers (cgroup v2, no hierarchy, not root).
func needLaunchers(t *testing.T) {
	t.Helper()
	if !launchersOn() {
		t.Skip("SKIPPING: launchers are for cgroup v1 as root; this host has no such hierarchy or runs unprivileged")
	}
}

// cgroupOf is the path of a /proc/<pid>/cgroup text's line for controller c.
func cgroupOf(text, c string) string {
	for _, line := range strings.Split(text, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && strings.Contains(","+parts[1]+",", ","+c+",") {
			return parts[2]
		}
	}
	return ""
}

// spareCount is how many spare groups l has ready.
func spareCount(l *Local) int {
	l.cgmu.Lock()
	defer l.cgmu.Unlock()
	return len(l.spares)
}

// readySpares has l make its spare groups (a first command, in a scratch
// sandbox, finds none and starts them) and waits for them.
func readySpares(t *testing.T, l *Local) {
	t.Helper()
	scratch := acquire(t, l, Spec{Name: "scratch"})
	if _, err := l.Exec(context.Background(), ExecRequest{Sandbox: scratch.Name, Argv: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	if !testwait.UntilEvery(10*time.Second, 10*time.Millisecond, func() bool { return spareCount(l) == spareTarget }) {
		t.Fatalf("the driver made no %d spare groups", spareTarget)
	}
}

// This process's pid is in a group while its launcher is there, and no
// listing that signals or kills sees it.
func TestLauncherIsNeverListed(t *testing.T) {
	needLaunchers(t)
	l := newLocal(t)
	readySpares(t, l)
	l.cgmu.Lock()
	g := l.spares[0].g
	l.cgmu.Unlock()
	self := strconv.Itoa(os.Getpid())
	for _, d := range g.launcherDirs() {
		raw, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if err != nil || !slices.Contains(strings.Fields(string(raw)), self) {
			t.Fatalf("%s lists %q, want this process (%s) for its launcher: %v", d, raw, self, err)
		}
		if pids := groupPids(d); slices.Contains(pids, os.Getpid()) {
			t.Fatalf("groupPids(%s) = %v lists this process", d, pids)
		}
	}
	if !g.empty() {
		t.Fatal("a group holding only its launcher is not empty")
	}
}

// A command started by a launcher is not in the freezer's group until the
// sandbox is paused; Pause moves it and what it forked there, frozen.
func TestPauseFreezesLauncherCommands(t *testing.T) {
	needLaunchers(t)
	if !hasFreezer() {
		t.Skip("SKIPPING: no freezer hierarchy")
	}
	l := newLocal(t)
	readySpares(t, l)
	sb := acquire(t, l, Spec{Name: "frozen"}) // its first command takes a spare
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := l.Exec(ctx, ExecRequest{Sandbox: sb.Name, Argv: []string{"sh", "-c", "sleep 300 & sleep 300; wait"}})
		done <- err
	}()
	pidsDir, freezerDir := cgroupDir("pids", sb.CgroupName), cgroupDir("freezer", sb.CgroupName)
	var pids []int
	if !testwait.UntilEvery(10*time.Second, 10*time.Millisecond, func() bool {
		pids = groupPids(pidsDir)
		return len(pids) >= 3 // sh and its two sleeps
	}) {
		t.Fatalf("the command's processes never showed: %v", pids)
	}
	if in := groupPids(freezerDir); len(in) != 0 {
		t.Fatalf("processes %v are in the freezer's group before the pause: not started by the launcher", in)
	}
	if err := l.Pause(context.Background(), sb.Name); err != nil {
		t.Fatal(err)
	}
	frozen := groupPids(freezerDir)
	for _, pid := range pids {
		if !slices.Contains(frozen, pid) {
			t.Errorf("process %d is not in the frozen group %v", pid, frozen)
		}
	}
	if state, _ := os.ReadFile(filepath.Join(freezerDir, "freezer.state")); strings.TrimSpace(string(state)) != "FROZEN" {
		t.Errorf("freezer.state %q", state)
	}
	self, _ := os.ReadFile("/proc/self/cgroup")
	if got := cgroupOf(string(self), "freezer"); strings.Contains(got, sb.CgroupName) {
		t.Fatalf("this process is in the sandbox's freezer group %s", got)
	}
	if err := l.Resume(context.Background(), sb.Name); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the stopped command never returned")
	}
}

// A sandbox's first command takes a spare group: renamed to the sandbox's,
// with the sandbox's limits, its launcher already in it; the spares are made
// again in a batch, after a sandbox is deleted, once few are left; Close
// removes them.
func TestSpareBecomesTheSandboxsGroup(t *testing.T) {
	needLaunchers(t)
	l := newLocal(t)
	readySpares(t, l)
	spares := func() int { return spareCount(l) }
	sb := acquire(t, l, Spec{Name: "second", MemoryMB: 64})
	var out bytes.Buffer
	if res, err := l.Exec(context.Background(), ExecRequest{Sandbox: sb.Name, Argv: []string{"cat", "/proc/self/cgroup"}, Stdout: &out}); err != nil || res.ExitCode != 0 {
		t.Fatalf("%+v %v", res, err)
	}
	for _, c := range controllers() {
		got, want := cgroupOf(out.String(), c), "/"+cgroupParent+"/"+sb.CgroupName+"/x"
		if c == "freezer" {
			if got != "/" {
				t.Errorf("freezer: %s, want / (a command started by a launcher joins it at pause)", got)
			}
		} else if !strings.HasPrefix(got, want) {
			t.Errorf("%s: %s, want %s…", c, got, want)
		}
	}
	if limit, _ := os.ReadFile(filepath.Join(cgroupDir("memory", sb.CgroupName), "memory.limit_in_bytes")); strings.TrimSpace(string(limit)) != strconv.Itoa(64<<20) {
		t.Errorf("memory.limit_in_bytes %q, want %d", limit, 64<<20)
	}
	l.cgmu.Lock()
	left := -1
	if p := l.pools[sb.Name]; p != nil && len(p.free) == 1 {
		left = len(p.free[0].lns)
	}
	l.cgmu.Unlock()
	// Without isolation a spare carries one launcher (a launcher is kept
	// for the command after when one follows soon; this one said none).
	if want := l.spareLaunchers() - 1; left != want || l.spareLaunchers() != 1 {
		t.Errorf("the spare's group kept %d launchers for the sandbox's next commands, want %d (a spare carries %d)", left, want, l.spareLaunchers())
	}
	if n := spares(); n != spareTarget-1 {
		t.Fatalf("%d spares after one was taken, want %d", n, spareTarget-1)
	}
	for i := spareTarget - 1; i > spareLow; i-- {
		more := acquire(t, l, Spec{Name: "more-" + strconv.Itoa(i)})
		if _, err := l.Exec(context.Background(), ExecRequest{Sandbox: more.Name, Argv: []string{"true"}}); err != nil {
			t.Fatal(err)
		}
	}
	if n := spares(); n != spareLow {
		t.Fatalf("%d spares, want %d", n, spareLow)
	}
	if err := l.Delete(context.Background(), sb.Name); err != nil {
		t.Fatal(err)
	}
	if !testwait.UntilEvery(10*time.Second, 10*time.Millisecond, func() bool { return spares() == spareTarget }) {
		t.Fatalf("the spares were not made again after a delete: %d", spares())
	}
	l.Close()
	for _, c := range controllers() {
		entries, _ := os.ReadDir(filepath.Join(cgroupRoot, c, cgroupParent))
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), l.groupPrefix+spareMark) {
				t.Errorf("Close left spare group %s/%s", c, e.Name())
			}
		}
	}
}

// Spare groups that a process no longer running left are removed at start.
func TestLeftSparesAreRemoved(t *testing.T) {
	needLaunchers(t)
	l := newLocal(t)
	name := "0000dead" + spareMark + "1.1-7" // pid 1 did not start at tick 1
	for _, c := range controllers() {
		if err := os.MkdirAll(filepath.Join(cgroupRoot, c, cgroupParent, name, "x1.1-7"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	l.KillLeftovers()
	for _, c := range controllers() {
		if _, err := os.Stat(filepath.Join(cgroupRoot, c, cgroupParent, name)); !os.IsNotExist(err) {
			t.Errorf("%s: the left spare is still there (%v)", c, err)
		}
	}
}

// A command that says another follows soon leaves its group with a
// launcher for it, and the next command starts from it (not in the freezer
// until a pause). Without isolation that launcher's thread stays for the
// command after (kept: the same launcher, no join), whether the sandbox is
// online (the host's network) or offline (its thread in the sandbox's
// namespace); with bwrap, whose start makes a mount namespace of the
// thread's own, a command started by a launcher has the launchers of the
// next two join while it runs (launchersAhead). The last command keeps
// none.
func TestNextSoonLeavesALauncher(t *testing.T) {
	needLaunchers(t)
	for _, c := range []struct {
		name   string
		driver func(*testing.T) *Local
		online bool
		kept   bool
	}{{"none offline", newLocal, false, true}, {"none online", newLocal, true, true}, {"bwrap", newIsolated, false, false}} {
		t.Run(c.name, func(t *testing.T) {
			l := c.driver(t)
			sb := acquire(t, l, Spec{Name: "steps", InternetEnabled: c.online})
			nextSoonLaunchers(t, l, sb, c.kept)
		})
	}
}

func nextSoonLaunchers(t *testing.T, l *Local, sb Sandbox, kept bool) {
	group := func() *execGroup {
		l.cgmu.Lock()
		defer l.cgmu.Unlock()
		if p := l.pools[sb.Name]; p != nil && len(p.free) == 1 {
			return p.free[0]
		}
		if p := l.pools[sb.Name]; p != nil {
			t.Fatalf("no group kept: %d free", len(p.free))
		}
		t.Fatal("no group kept: no pool")
		return nil
	}
	launchers := func() []*launcher {
		g := group()
		for _, ln := range g.lns {
			if !ln.usable() {
				t.Fatalf("a launcher's join failed: %v", ln.err)
			}
		}
		return slices.Clone(g.lns)
	}
	var readOnly []string
	if l.isolated() {
		// A host file seen read-only: every command a bwrap of its own,
		// never the sandbox's holder (holder.go), whose commands keep
		// their launcher as without isolation (TestHolderCommandsKeepTheirLauncher).
		readOnly = []string{filepath.Join(t.TempDir(), "ro")}
		if err := os.WriteFile(readOnly[0], nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(nextSoon bool) string {
		var out bytes.Buffer
		if res, err := l.Exec(context.Background(), ExecRequest{Sandbox: sb.Name, Argv: []string{"cat", "/proc/self/cgroup"}, Stdout: &out, NextSoon: nextSoon, ReadOnly: readOnly}); err != nil || res.ExitCode != 0 {
			t.Fatalf("%+v %v", res, err)
		}
		return out.String()
	}
	// A new driver has no spare yet: the first command joins when it starts.
	run(true)
	first := launchers()
	if len(first) != 1 {
		t.Fatalf("the group the first command left has %d launchers, want 1", len(first))
	}
	for i := 0; i < 3; i++ {
		out := run(true)
		if l.isolated() {
			// bwrap gives the command its own cgroup namespace: it sees "/"
		} else if got := cgroupOf(out, "pids"); !strings.HasPrefix(got, "/"+cgroupParent+"/"+sb.CgroupName+"/x") {
			t.Fatalf("pids: %s", got)
		}
		if hasFreezer() && !l.isolated() {
			if got := cgroupOf(out, "freezer"); got != "/" {
				t.Fatalf("freezer: %s, want / (started by the launcher)", got)
			}
		}
		now := launchers()
		if kept && (len(now) != 1 || now[0] != first[0]) {
			t.Fatalf("command %d left launchers %p, want the one that started it (%p) kept", i+2, now, first[0])
		}
		if !kept && len(now) != launchersAhead {
			t.Fatalf("command %d left %d launchers, want %d", i+2, len(now), launchersAhead)
		}
	}
	run(false)
	want := launchersAhead - 1
	if kept {
		want = 0 // the kept one ended with the last command
	}
	if n := len(launchers()); n != want {
		t.Fatalf("the last command left %d launchers, want %d", n, want)
	}
	if kept && !first[0].ended {
		t.Fatal("the launcher the last command used was not retired")
	}
}

// A kept launcher whose thread entered a sandbox's network namespace never
// starts a command that runs on the host's network: it is retired and the
// command joins its groups when it starts, on the host's network.
func TestKeptLauncherInANamespaceStartsNoHostCommand(t *testing.T) {
	needLaunchers(t)
	l := newLocal(t)
	sb := acquire(t, l, Spec{Name: "hostnet", InternetEnabled: true})
	run := func(nextSoon bool) string {
		var out bytes.Buffer
		if res, err := l.Exec(context.Background(), ExecRequest{Sandbox: sb.Name, Argv: []string{"readlink /proc/self/ns/net; cat /proc/self/cgroup"}, Stdout: &out, NextSoon: nextSoon}); err != nil || res.ExitCode != 0 {
			t.Fatalf("%+v %v", res, err)
		}
		return out.String()
	}
	run(true)
	run(true) // started by the launcher the first left; kept
	l.cgmu.Lock()
	var kept *launcher
	if p := l.pools[sb.Name]; p != nil && len(p.free) == 1 && len(p.free[0].lns) == 1 {
		kept = p.free[0].lns[0]
	}
	l.cgmu.Unlock()
	if kept == nil {
		t.Fatal("no launcher kept")
	}
	kept.netns = true // as if a command it started had entered a namespace
	out := run(true)
	hostNet, _ := os.Readlink("/proc/self/ns/net")
	if !strings.HasPrefix(out, hostNet+"\n") {
		t.Fatalf("the command ran in %q, want the host's network %s", strings.SplitN(out, "\n", 2)[0], hostNet)
	}
	if got := cgroupOf(out, "pids"); !strings.HasPrefix(got, "/"+cgroupParent+"/"+sb.CgroupName+"/") {
		t.Fatalf("pids: %s, want the sandbox's group", got)
	}
	kept.mu.Lock()
	ended := kept.ended
	kept.mu.Unlock()
	if !ended {
		t.Fatal("the launcher in a namespace was not retired")
	}
}

// A command started by a kept launcher that leaves a process behind has
// its group killed and removed at once: the launcher's thread, in the
// group, ends with the command instead of holding the group (whose removal
// then waited out killDeadline in each hierarchy before the step could
// end).
func TestKeptLauncherLeavesWithAKilledGroup(t *testing.T) {
	needLaunchers(t)
	l := newLocal(t)
	sb := acquire(t, l, Spec{Name: "leftover", InternetEnabled: true})
	exec := func(cmd string) ExecResult {
		res, err := l.Exec(context.Background(), ExecRequest{Sandbox: sb.Name, Argv: []string{cmd}, NextSoon: true})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%+v %v", res, err)
		}
		return res
	}
	exec("true")
	exec("true") // started by the launcher the first left; kept
	l.cgmu.Lock()
	var g *execGroup
	if p := l.pools[sb.Name]; p != nil && len(p.free) == 1 && len(p.free[0].lns) == 1 {
		g = p.free[0]
	}
	l.cgmu.Unlock()
	if g == nil {
		t.Fatal("no group with a kept launcher")
	}
	kept, dirs := g.lns[0], slices.Clone(g.dirs)
	// Leaves its sleep: the group is killed. The step's end waited out the
	// group's removal while the thread was in it (not a speed bound: the
	// removal's deadline, which no kill of a sleep approaches).
	if res := exec("sleep 100 & echo left"); res.Duration >= killDeadline {
		t.Errorf("the step took %v: its group's removal waited out its deadline", res.Duration)
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("the killed group %s is still there (%v)", d, err)
		}
	}
	kept.mu.Lock()
	ended := kept.ended
	kept.mu.Unlock()
	if !ended {
		t.Error("the launcher of a command whose group was killed was kept")
	}
}

// TestReadSmall: readSmall reads a file whole at every size around its
// first buffer, and reports a missing file as os.ErrNotExist.
func TestReadSmall(t *testing.T) {
	d := t.TempDir()
	for _, n := range []int{0, 1, 511, 512, 513, 5000} {
		want := strings.Repeat("7\n", n/2) + strings.Repeat("x", n%2)
		if err := os.WriteFile(filepath.Join(d, "f"), []byte(want), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := readSmall(filepath.Join(d, "f"))
		if err != nil || string(got) != want {
			t.Fatalf("%d bytes: read %d bytes, %v", n, len(got), err)
		}
	}
	if _, err := readSmall(filepath.Join(d, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a missing file: %v, want os.ErrNotExist", err)
	}
}
