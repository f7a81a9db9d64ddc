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
	"time"
)

// Cgroups: a sandbox's limits live on a group of its own,
// linefactory/<driver hash>-<sandbox>, made when a command starts in it and
// removed cgroupLinger after its last command ends (cgpool.go), so an idle
// sandbox and a finished run hold none. Each command gets a child group,
// <owner>-<n>, which its first process enters before it runs (cgroup v2:
// clone into it; v1: joined at exec, tracejoin.go, or by a shim that writes
// its own pid, then execs the command), so nothing it forks escapes;
// stopping a command kills its whole group (v2 cgroup.kill; v1 freeze, kill
// every pid, thaw), setsid daemons included. A command's group that its
// command left empty is kept for the sandbox's next command.

// cgroupRoot is where cgroups are mounted.
var cgroupRoot = "/sys/fs/cgroup"

// cgroupParent groups Linefactory's sandboxes under each controller.
const cgroupParent = "linefactory"

// v1Controllers are the cgroup v1 hierarchies a command joins (those
// mounted): freezer and pids always, memory and cpu for limits.
var v1Controllers = []string{"freezer", "pids", "memory", "cpu"}

// cgroupV2 tells whether the unified hierarchy is mounted at cgroupRoot.
func cgroupV2() bool { return layout().v2 }

// cgroupDir is a sandbox's group under a v1 controller ("" for v2).
func cgroupDir(controller, group string) string {
	return filepath.Join(cgroupRoot, controller, cgroupParent, group)
}

// controllers lists the hierarchies in use: "" alone for v2, else the v1
// controllers mounted here. The slice is shared: callers do not change it.
func controllers() []string { return layout().controllers }

// cgroupLayout is what is mounted at cgroupRoot.
type cgroupLayout struct {
	v2          bool
	controllers []string
}

// layout reads what is mounted at cgroupRoot once: hierarchies are
// mounted before factoryd starts, and each sandbox's Acquire, command and
// Delete asked again (five stats a time, some twenty a sandbox).
var layout = sync.OnceValue(func() cgroupLayout {
	if _, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers")); err == nil {
		return cgroupLayout{v2: true, controllers: []string{""}}
	}
	var cs []string
	for _, c := range v1Controllers {
		if _, err := os.Stat(filepath.Join(cgroupRoot, c, "cgroup.procs")); err == nil {
			cs = append(cs, c)
		}
	}
	return cgroupLayout{controllers: cs[:len(cs):len(cs)]} // an append copies
})

// rmdir removes an empty directory (a group the kernel lets go: no process
// and no child group in it) with one system call; os.Remove tries unlink
// first.
func rmdir(dir string) error {
	err := syscall.Rmdir(dir)
	if err != nil {
		return &os.PathError{Op: "rmdir", Path: dir, Err: err}
	}
	return nil
}

// describeLimits fills LimitsApplied for a new sandbox.
func describeLimits(sb *Sandbox) {
	cs := controllers()
	has := func(c string) bool {
		for _, x := range cs {
			if x == c || x == "" {
				return true
			}
		}
		return false
	}
	kind := "cgroup v1"
	if cgroupV2() {
		kind = "cgroup v2"
	}
	set := func(key, controller string, on bool) {
		switch {
		case !on:
		case has(controller):
			sb.LimitsApplied[key] = "enforced by " + kind + " " + filepath.Join(cgroupParent, sb.CgroupName) + " (every process of the sandbox, joined before it runs)"
		default:
			sb.LimitsApplied[key] = "not enforced: no " + controller + " cgroup controller on this host"
		}
	}
	set("memory_mb", "memory", sb.MemoryMB > 0)
	set("vcpus", "cpu", sb.Vcpus > 0)
	if has("freezer") {
		sb.LimitsApplied["pause"] = "freezer cgroup"
	} else {
		sb.LimitsApplied["pause"] = "SIGSTOP to the sandbox's processes (no freezer cgroup)"
	}
}

// limitFiles are the files that set a sandbox's limits, per controller.
func limitFiles(sb Sandbox, controller string) [][2]string {
	var files [][2]string
	mem := strconv.FormatInt(int64(sb.MemoryMB)<<20, 10)
	switch controller {
	case "":
		if sb.MemoryMB > 0 {
			files = append(files, [2]string{"memory.max", mem}, [2]string{"memory.swap.max", "0"})
		}
		if sb.Vcpus > 0 {
			files = append(files, [2]string{"cpu.max", strconv.Itoa(sb.Vcpus*100000) + " 100000"})
		}
	case "memory":
		if sb.MemoryMB > 0 {
			files = append(files, [2]string{"memory.limit_in_bytes", mem})
		}
	case "cpu":
		if sb.Vcpus > 0 {
			files = append(files, [2]string{"cpu.cfs_period_us", "100000"}, [2]string{"cpu.cfs_quota_us", strconv.Itoa(sb.Vcpus * 100000)})
		}
	}
	return files
}

// execGroup is one command's cgroup in every hierarchy in use.
type execGroup struct {
	dirs []string // one per hierarchy
	v2   bool
	// lns are the launchers that will start the group's next commands, in
	// order (v1; launcher.go); l.cgmu guards them while the group is kept.
	lns []*launcher
}

// procsFiles are the files a v1 shim writes its pid into.
func (g *execGroup) procsFiles() []string {
	files := make([]string, len(g.dirs))
	for i, d := range g.dirs {
		files[i] = filepath.Join(d, "cgroup.procs")
	}
	return files
}

// makeExecGroup creates the sandbox's group (with its limits) if needed and
// a child group for one command.
func makeExecGroup(sb Sandbox, name string) (*execGroup, error) {
	g := &execGroup{v2: cgroupV2()}
	for _, c := range controllers() {
		parent := filepath.Join(cgroupRoot, c, cgroupParent)
		sbDir := filepath.Join(parent, sb.CgroupName)
		if err := os.MkdirAll(parent, 0o755); err != nil {
			return g, err
		}
		if g.v2 {
			enableControllers(cgroupRoot)
			enableControllers(parent)
		}
		if err := os.Mkdir(sbDir, 0o755); err == nil {
			if g.v2 {
				enableControllers(sbDir)
			}
			for _, f := range limitFiles(sb, c) {
				if err := os.WriteFile(filepath.Join(sbDir, f[0]), []byte(f[1]), 0o644); err != nil {
					return g, fmt.Errorf("set %s: %w", f[0], err)
				}
			}
		} else if !errors.Is(err, os.ErrExist) {
			return g, err
		}
		dir := filepath.Join(sbDir, name)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return g, err
		}
		g.dirs = append(g.dirs, dir)
	}
	return g, nil
}

// enableControllers delegates memory, cpu and pids to dir's children (v2).
func enableControllers(dir string) {
	for _, c := range []string{"memory", "cpu", "pids"} {
		_ = os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+"+c), 0o644)
	}
}

// groupPids lists the processes in the group's hierarchies (and below), but
// this process, whose launcher thread may be there.
func groupPids(dir string) []int {
	var pids []int
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		got, _ := procsOf(filepath.Join(p, "cgroup.procs")) // never this process (a launcher's)
		pids = append(pids, got...)
		return nil
	})
	return pids
}

// killCgroup kills every process in dir and its children (a v2 group, or
// the group of the v1 hierarchy in which case the freezer's twin is used to
// stop them forking meanwhile), then removes the groups.
// killDeadline bounds killCgroup's wait for a group to empty and go.
const killDeadline = 5 * time.Second

func killCgroup(dir string, v2 bool) {
	// The kernel removes a group only while no process is in it and it has
	// no child group: a group that goes at once had nothing left to kill
	// (the usual end of a command, whose processes all ended with it).
	if err := rmdir(dir); err == nil || errors.Is(err, os.ErrNotExist) {
		return
	}
	if v2 {
		_ = os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0o644)
	} else if emptiedSoon(dir) {
		return
	}
	freezer := ""
	if !v2 && strings.HasPrefix(dir, filepath.Join(cgroupRoot, "freezer")+"/") {
		freezer = filepath.Join(dir, "freezer.state")
		_ = os.WriteFile(freezer, []byte("FROZEN"), 0o644)
	}
	deadline := time.Now().Add(killDeadline)
	// A killed process leaves its group within microseconds to a few
	// milliseconds (bwrap's init outlives the command it reports on by
	// about that): look again soon, then less often.
	pause := 100 * time.Microsecond
	for {
		pids := groupPids(dir)
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if freezer != "" {
			_ = os.WriteFile(freezer, []byte("THAWED"), 0o644) // a frozen process cannot die
		}
		if len(pids) == 0 && removeTree(dir) == nil || time.Now().After(deadline) {
			return
		}
		time.Sleep(pause)
		pause = min(2*pause, 10*time.Millisecond)
		if freezer != "" {
			_ = os.WriteFile(freezer, []byte("FROZEN"), 0o644)
		}
	}
}

// emptiedSoon kills what is left in a v1 group, without freezing it, for
// up to about a millisecond, and removes the group if it empties: what is
// usually left when a command has ended is exiting already (an isolated
// command's PID namespace, whose init outlives the bwrap process that
// reported on it by that much). Freezing and thawing a v1 group costs the
// whole machine (the kernel patches its code on every CPU each time the
// first group freezes or the last thaws), so it is kept for a group whose
// processes are still there after that (killCgroup's loop, which freezes
// them so that none can fork meanwhile).
func emptiedSoon(dir string) bool {
	for pause := 50 * time.Microsecond; pause <= 400*time.Microsecond; pause *= 2 {
		pids := groupPids(dir)
		if len(pids) == 0 && removeTree(dir) == nil {
			return true
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(pause)
	}
	return false
}

// removeTree removes a cgroup directory and its child groups.
func removeTree(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := removeTree(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	if err := rmdir(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// kill kills every process of the command and removes its groups.
func (g *execGroup) kill() {
	g.retireLaunchers()
	// the freezer first: it stops the others' processes from forking
	for i := len(g.dirs) - 1; i >= 0; i-- {
		if strings.Contains(g.dirs[i], "/freezer/") {
			killCgroup(g.dirs[i], g.v2)
		}
	}
	for _, d := range g.dirs {
		if !strings.Contains(d, "/freezer/") { // killed above
			killCgroup(d, g.v2)
		}
	}
}

// sandboxGroups are a sandbox's group directories, one per hierarchy.
func sandboxGroups(sb Sandbox) []string {
	var dirs []string
	for _, c := range controllers() {
		dirs = append(dirs, cgroupDir(c, sb.CgroupName))
	}
	return dirs
}

// removeCgroups kills whatever runs in the sandbox's groups and removes
// them.
func removeCgroups(sb Sandbox) {
	v2 := cgroupV2()
	dirs := sandboxGroups(sb)
	for _, d := range dirs {
		if !v2 && strings.Contains(d, "/freezer/") {
			killCgroup(d, v2)
		}
	}
	for _, d := range dirs {
		killCgroup(d, v2)
	}
}

// removeIfIdle removes the sandbox's groups when no command is in them:
// the kernel removes a group only while no process and no child group is
// in it.
func removeIfIdle(sb Sandbox) {
	for _, d := range sandboxGroups(sb) {
		_ = rmdir(d)
	}
}

// freeze sets the sandbox's freezer state (FROZEN or THAWED) and waits for
// it; false when the sandbox has no group to freeze (nothing runs).
func freeze(sb Sandbox, state string) (bool, error) {
	if cgroupV2() {
		path := filepath.Join(cgroupRoot, cgroupParent, sb.CgroupName, "cgroup.freeze")
		v := "0"
		if state == "FROZEN" {
			v = "1"
		}
		if err := os.WriteFile(path, []byte(v), 0o644); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return false, nil
			}
			return true, err
		}
		return true, nil
	}
	path := filepath.Join(cgroupDir("freezer", sb.CgroupName), "freezer.state")
	if err := os.WriteFile(path, []byte(state), 0o644); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		return true, err
	}
	deadline := time.Now().Add(killDeadline)
	for {
		data, err := os.ReadFile(path)
		if err != nil {
			return true, err
		}
		if strings.TrimSpace(string(data)) == state {
			return true, nil
		}
		if time.Now().After(deadline) {
			return true, errors.New("freezer did not reach " + state)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// hasFreezer tells whether pause can use a freezer.
func hasFreezer() bool {
	for _, c := range controllers() {
		if c == "" || c == "freezer" {
			return true
		}
	}
	return false
}

// ourGroups lists the sandbox group names of this driver left in the
// cgroup hierarchies.
func ourGroups(prefix string) map[string]bool {
	names := map[string]bool{}
	for _, c := range controllers() {
		entries, _ := os.ReadDir(filepath.Join(cgroupRoot, c, cgroupParent))
		for _, e := range entries {
			if e.IsDir() && strings.HasPrefix(e.Name(), prefix+"-") {
				names[e.Name()] = true
			}
		}
	}
	return names
}
