package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Launchers (cgroup v1). A process enters a v1 cgroup by having its pid
// written into the hierarchy's cgroup.procs, and the first such write of a
// burst waits for an RCU grace period (the kernel's global
// cgroup_threadgroup_rwsem): 11–16 ms on an idle host for a command that
// joins its groups when it starts, 0.85 ms on average between the steps of
// a job. A launcher is an OS thread of this process that entered a command
// group's pids, memory and cpu hierarchies beforehand (its thread id in
// their tasks files, off the step's path): the command, forked from that
// thread, starts in them by inheritance, with no write, and the thread ends
// with the command. When the caller says another command follows soon
// (ExecRequest.NextSoon: a job's next step), a group's launchers for the
// next two commands join while its command runs (launchersAhead), and a
// driver keeps spare groups with two (spare below) for a sandbox's first
// commands. A launcher whose command left its group empty, and whose thread
// made no mount namespace of its own (isolation none), is kept by the group
// for its next command when one follows soon: the thread, in the group
// already, starts the sandbox's next command too, and no launcher joins
// ahead for it (a thread made and joined per command cost about
// 0.2 ms of CPU, and its join a grace period other commands' exits waited
// on).
//
// A launcher never enters the freezer: frozen while it holds (or is handed)
// a scheduler P, a thread of this process would stall the whole process. So
// a command started by a launcher is not in the sandbox's freezer group
// until the sandbox is paused: Pause freezes the group and then moves into
// it every process of the sandbox that is not in it yet (sweepIntoFreezer),
// each frozen as it joins. Stopping and killing a command go by its pids
// group, which holds all of it.
//
// While a launcher is in a group, this process's pid is listed in the
// group's cgroup.procs: every listing that signals, kills or checks for
// emptiness skips it (groupPids, procsOf).

// launcher is a thread that has entered (or is entering) a group's
// hierarchies and runs starts on it, one at a time: its owner (the group's
// list, or the command it started) hands it a job, and after a job that
// keeps it (returns true) another, until it is retired.
type launcher struct {
	ready chan struct{} // closed when the join has ended; err tells how
	err   error
	jobs  chan func() bool
	mu    sync.Mutex
	// ended: retired, or its thread ended with a job that did not keep it.
	ended bool
	// netns: its thread has entered a sandbox's network namespace (set by
	// a job before it reports its start).
	netns bool
	gone  chan struct{} // closed when the thread's goroutine returned
}

// newLauncher starts a thread that joins dirs and then runs the jobs it is
// handed (run) until one does not keep it or it is retired.
func newLauncher(dirs []string) *launcher {
	ln := &launcher{ready: make(chan struct{}), jobs: make(chan func() bool, 1), gone: make(chan struct{})}
	// onOwnThread: never the main thread, and the thread ends with f (it
	// returns locked), leaving its groups without a write.
	onOwnThread(func() {
		defer close(ln.gone)
		tid := []byte(strconv.Itoa(syscall.Gettid()))
		for _, d := range dirs {
			if err := os.WriteFile(filepath.Join(d, "tasks"), tid, 0o644); err != nil {
				ln.err = fmt.Errorf("join %s: %w", d, err)
				break
			}
		}
		close(ln.ready)
		if ln.err != nil {
			return
		}
		for job := range ln.jobs {
			if !job() {
				ln.mu.Lock()
				ln.ended = true
				ln.mu.Unlock()
				return
			}
		}
	})
	return ln
}

// usable waits for the launcher's join and tells whether it succeeded.
func (ln *launcher) usable() bool {
	<-ln.ready
	return ln.err == nil
}

// run hands f to the launcher's thread; false when the launcher has ended
// (f does not run). f returns whether the thread may run another job. The
// caller owns the launcher: one job at a time.
func (ln *launcher) run(f func() bool) bool {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	if ln.ended {
		return false
	}
	ln.jobs <- f
	return true
}

// retire ends the launcher's thread, once its job (if any) has returned,
// and waits for its goroutine.
func (ln *launcher) retire() {
	ln.end()
	<-ln.gone
}

// end has the launcher's thread end once its job (if any) has returned,
// without waiting for it.
func (ln *launcher) end() {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	if !ln.ended {
		ln.ended = true
		close(ln.jobs)
	}
}

// launcherDirs are the group's directories a launcher enters: all but the
// freezer's.
func (g *execGroup) launcherDirs() []string {
	var dirs []string
	for _, d := range g.dirs {
		if !strings.Contains(d, "/freezer/") {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// launchersOn tells whether commands start from launchers: cgroup v1 with
// at least one hierarchy (v2 clones a command straight into its group).
func launchersOn() bool {
	return !noLaunchers && !shimOnly && v1Root()
}

// v1Root tells, once per process, whether this process is root on a host
// with cgroup v1 hierarchies (launchersOn is asked on every command).
var v1Root = sync.OnceValue(func() bool {
	return os.Geteuid() == 0 && !cgroupV2() && len(controllers()) > 0
})

// noLaunchers makes every command join its groups when it starts (tests of
// that path).
var noLaunchers bool

// launchersAhead is how many launchers a group holds for the commands
// that follow (ExecRequest.NextSoon): the next one's and the one after's.
// A join made after the launchers' idle time waits a grace period (10–25 ms
// here), longer than a job's step and its round trip through Temporal
// (about 7 ms): a launcher that begins joining when the command before the
// previous one starts is ready in time.
const launchersAhead = 2

// hasLauncher tells whether the group has a launcher for its next command.
func (g *execGroup) hasLauncher() bool { return g != nil && len(g.lns) > 0 }

// needsShim tells whether a command joins g through the shim, which
// writes its own pid into the group's cgroup.procs files before it execs
// the command: on cgroup v1, when no launcher thread is in the group to
// fork it there and it cannot be traced in (tracejoin.go).
func (g *execGroup) needsShim() bool {
	return g != nil && !g.v2 && !g.hasLauncher() && !traceJoin(g)
}

// takeLauncher returns the group's next launcher, once it has joined, and
// takes it from the group (a launcher starts one command); nil when the
// group has none or its join failed (the others are retired then).
func (g *execGroup) takeLauncher() *launcher {
	if !g.hasLauncher() {
		return nil
	}
	ln := g.lns[0]
	g.lns = g.lns[1:]
	if !ln.usable() {
		g.retireLaunchers() // their joins are failing as well
		return nil          // its thread has ended
	}
	return ln
}

// addLaunchers starts launchers joining the group until it has n.
func (g *execGroup) addLaunchers(n int) {
	for len(g.lns) < n {
		g.lns = append(g.lns, newLauncher(g.launcherDirs()))
	}
}

// retireLaunchers ends the group's unused launchers.
func (g *execGroup) retireLaunchers() {
	for _, ln := range g.lns {
		ln.retire()
	}
	g.lns = nil
}

// procsOf lists the pids in a cgroup.procs file, but this process's.
func procsOf(path string) ([]int, error) {
	data, err := readSmall(path)
	if err != nil {
		return nil, err
	}
	self := os.Getpid()
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil && pid != self {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// readSmall reads a small file (a group's cgroup.procs) with open, read
// and close: os.ReadFile also stats it and offers it to Go's poller, some
// nine system calls, and a command's end reads four of these.
func readSmall(path string) ([]byte, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer syscall.Close(fd)
	buf := make([]byte, 0, 512)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := syscall.Read(fd, buf[len(buf):cap(buf)])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}

// sweepIntoFreezer moves into the sandbox's freezer group, which Pause has
// just frozen, every process in the sandbox's other groups that is not in it
// (commands started by launchers, and what they forked); each is frozen as
// it joins. It repeats until none is left out: one not yet moved may fork.
func sweepIntoFreezer(sb Sandbox) error {
	freezer := cgroupDir("freezer", sb.CgroupName)
	var others []string // the hierarchies launchers enter
	for _, d := range sandboxGroups(sb) {
		if d != freezer {
			others = append(others, d)
		}
	}
	for round := 0; round < 100; round++ {
		in := map[int]bool{}
		for _, pid := range groupPids(freezer) {
			in[pid] = true
		}
		var out []int
		for _, d := range others {
			for _, pid := range groupPids(d) {
				if !in[pid] {
					in[pid] = true // once per round
					out = append(out, pid)
				}
			}
		}
		if len(out) == 0 {
			return nil
		}
		for _, pid := range out {
			err := os.WriteFile(filepath.Join(freezer, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644)
			if err != nil && !errors.Is(err, syscall.ESRCH) {
				return fmt.Errorf("freeze process %d: %w", pid, err)
			}
		}
	}
	return errors.New("the sandbox's processes kept forking while it was being frozen")
}

// Spare groups: a sandbox's first command has no kept group (putGroup)
// whose launcher joined in the background, so the driver keeps spareTarget
// groups of its own, each a sandbox-level group named <prefix>+spare-
// <owner>-<n> (a name no sandbox can have) holding one command group with a
// launcher in it. A sandbox's first command takes one: its sandbox-level
// directories are renamed to the sandbox's (cgroup v1 renames a group within
// its parent; the processes in it stay) and get the sandbox's limits. The
// spares are made again in the background.

// spareTarget is how many spare groups a driver keeps, made again in one
// batch when only spareLow are left, after a sandbox is deleted: a
// launcher's join holds the kernel's cgroup mutex while it waits for the
// grace period, which holds up every cgroup made or removed meanwhile (so
// not while a finished sandbox's groups are being removed), and joins that
// follow each other share one grace period.
const (
	spareTarget = 4
	spareLow    = 1
)

// spare is a spare group: its sandbox-level name and its command group.
type spare struct {
	name string
	g    *execGroup
}

// spareMark separates a spare's name from the driver's prefix ('+' is not
// in sandbox names, nameRE).
const spareMark = "+spare-"

// takeSpare makes a spare the sandbox's groups, for its first command; nil
// when there is none ready or the sandbox has groups already. l.cgmu is
// held.
func (l *Local) takeSpare(sb Sandbox) *execGroup {
	if !launchersOn() || l.closed {
		return nil
	}
	if len(l.spares) == 0 {
		l.fillSpares()
		return nil
	}
	sp := l.spares[len(l.spares)-1]
	l.spares = l.spares[:len(l.spares)-1]
	var renamed []string // the hierarchies' parents renamed so far
	for _, d := range sp.g.dirs {
		parent := filepath.Dir(filepath.Dir(d))
		// The kernel refuses a name that is taken (EEXIST); os.Rename would
		// stat it first.
		if err := syscall.Rename(filepath.Join(parent, sp.name), filepath.Join(parent, sb.CgroupName)); err != nil {
			for _, p := range renamed { // the sandbox has groups (EEXIST): the spare stays a spare
				_ = syscall.Rename(filepath.Join(p, sb.CgroupName), filepath.Join(p, sp.name))
			}
			if len(renamed) == 0 || errors.Is(err, os.ErrExist) {
				l.spares = append(l.spares, sp)
			} else {
				l.dropSpare(sp)
			}
			return nil
		}
		renamed = append(renamed, parent)
	}
	g := sp.g
	for i, d := range g.dirs {
		parent := filepath.Dir(filepath.Dir(d))
		g.dirs[i] = filepath.Join(parent, sb.CgroupName, filepath.Base(d))
		c := filepath.Base(filepath.Dir(parent)) // the controller
		for _, f := range limitFiles(sb, c) {
			if err := os.WriteFile(filepath.Join(parent, sb.CgroupName, f[0]), []byte(f[1]), 0o644); err != nil {
				// Without its limits the group cannot serve the sandbox.
				g.kill()
				removeIfIdle(sb)
				return nil
			}
		}
	}
	return g
}

// fillSpares starts making spares in the background until there are
// spareTarget; l.cgmu is held.
func (l *Local) fillSpares() {
	if l.filling || l.closed || len(l.spares) > spareLow {
		return
	}
	l.filling = true
	go func() {
		for {
			sp, err := l.makeSpare()
			l.cgmu.Lock()
			if err != nil || l.closed {
				if sp != nil {
					l.dropSpare(sp)
				}
				l.filling = false
				l.cgmu.Unlock()
				return
			}
			l.spares = append(l.spares, sp)
			if len(l.spares) >= spareTarget {
				l.filling = false
				l.cgmu.Unlock()
				return
			}
			l.cgmu.Unlock()
		}
	}()
}

// makeSpare makes a spare group with launchers that have joined it
// (spareLaunchers).
func (l *Local) makeSpare() (*spare, error) {
	seq := strconv.FormatInt(execSeq.Add(1), 10)
	sp := &spare{name: l.groupPrefix + spareMark + l.owner + "-" + seq}
	g, err := makeExecGroup(Sandbox{CgroupName: sp.name}, "x"+l.owner+"-"+seq)
	sp.g = g
	if err != nil {
		return sp, err
	}
	g.addLaunchers(l.spareLaunchers())
	for _, ln := range g.lns {
		if !ln.usable() {
			return sp, ln.err
		}
	}
	return sp, nil
}

// spareLaunchers is how many launchers a spare carries: the sandbox's first
// command's and, with bwrap, whose launchers start one command each, its
// second's, in case another follows soon (without isolation the first
// command's launcher is kept for it).
func (l *Local) spareLaunchers() int {
	if l.isolated() {
		return launchersAhead
	}
	return 1
}

// dropSpare removes a spare group (its launcher ends first); l.cgmu is
// held.
func (l *Local) dropSpare(sp *spare) {
	sp.g.kill()
	removeIfIdle(Sandbox{CgroupName: sp.name})
}

// dropSpares removes the driver's spare groups; l.cgmu is held.
func (l *Local) dropSpares() {
	for _, sp := range l.spares {
		l.dropSpare(sp)
	}
	l.spares = nil
}

// removeLeftSpares removes the spare groups that processes no longer
// running left, whatever their driver's directory (a spare holds nothing
// but its owner's launcher thread, which ended with it).
func (l *Local) removeLeftSpares() {
	for _, c := range controllers() {
		parent := filepath.Join(cgroupRoot, c, cgroupParent)
		entries, _ := os.ReadDir(parent)
		for _, e := range entries {
			_, rest, ok := strings.Cut(e.Name(), spareMark)
			if owner := spareOwner(rest); ok && e.IsDir() && owner != l.owner && !alive(owner) {
				killCgroup(filepath.Join(parent, e.Name()), cgroupV2())
			}
		}
	}
}

// freezeAll pauses the sandbox: its freezer group frozen, with every
// process of the sandbox in it (sweepIntoFreezer, cgroup v1).
func freezeAll(sb Sandbox) error {
	there, err := freeze(sb, "FROZEN")
	if err != nil || !there || cgroupV2() {
		return err
	}
	if err := sweepIntoFreezer(sb); err != nil {
		return err
	}
	_, err = freeze(sb, "FROZEN") // and wait until those moved in are frozen too
	return err
}

// spareOwner is the owner in what follows a spare's mark (a spare group's
// or a spare directory's name): <owner>-<n>.
func spareOwner(rest string) string {
	if i := strings.LastIndexByte(rest, '-'); i >= 0 {
		return rest[:i]
	}
	return rest
}
