package sandbox

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// markerEnv is set in every step process's environment to
// "<driver hash>-<sandbox>/<owner>", where owner names the worker process
// that started it ("<pid>.<start time>"), so that processes a crashed worker
// left behind can be told from those of a live one.
const markerEnv = "LINEFACTORY_SANDBOX"

func (l *Local) marker(name string) string {
	return l.groupPrefix + "-" + name + "/" + l.owner
}

// processID identifies a process across pid reuse: "<pid>.<start time>".
func processID(pid int) string {
	return strconv.Itoa(pid) + "." + startTime(pid)
}

// startTime is field 22 of /proc/<pid>/stat, or "" when pid is gone.
func startTime(pid int) string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	// the command name (field 2) may hold spaces: fields start after ')'
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 20 {
		return ""
	}
	return f[19]
}

func alive(owner string) bool {
	pid, _, ok := strings.Cut(owner, ".")
	n, err := strconv.Atoi(pid)
	return ok && err == nil && processID(n) == owner
}

// KillLeftovers kills step processes that a worker which is no longer
// running left behind in this driver's sandboxes: every process in a
// sandbox's cgroups while no command of this driver runs, and every process
// whose environment carries this driver's marker with a dead owner. Call it
// at worker start, before any step runs. It returns the pids it killed.
func (l *Local) KillLeftovers() []int {
	var killed []int
	l.cgmu.Lock()
	for name, p := range l.pools {
		if !l.busy(name) {
			l.dropGroupsLocked(p.sb)
		}
	}
	for group := range ourGroups(l.groupPrefix) {
		killed = append(killed, l.killLeftGroup(group)...)
	}
	l.removeLeftSpares()
	l.cgmu.Unlock()
	l.removeLeftSpareDirs()
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if owner, ok := l.ownerOf(pid); ok && !alive(owner) {
			_ = syscall.Kill(pid, syscall.SIGCONT)
			killPid(pid)
			killed = append(killed, pid)
		}
	}
	return killed
}

// ownerOf returns the owner in pid's marker, if it carries this driver's.
func (l *Local) ownerOf(pid int) (string, bool) {
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return "", false
	}
	prefix := []byte(markerEnv + "=" + l.groupPrefix + "-")
	for _, kv := range bytes.Split(environ, []byte{0}) {
		if bytes.HasPrefix(kv, prefix) {
			_, owner, _ := strings.Cut(string(kv[len(prefix):]), "/")
			return owner, true
		}
	}
	return "", false
}

// killLeftGroup kills the commands in a sandbox's cgroup whose worker is
// gone (their group is named after it) and removes the emptied groups.
func (l *Local) killLeftGroup(group string) []int {
	var killed []int
	if l.busy(strings.TrimPrefix(group, l.groupPrefix+"-")) {
		return nil
	}
	v2 := cgroupV2()
	for _, c := range controllers() {
		dir := filepath.Join(cgroupRoot, c, cgroupParent, group)
		switch { // a paused sandbox's processes cannot die
		case v2:
			_ = os.WriteFile(filepath.Join(dir, "cgroup.freeze"), []byte("0"), 0o644)
		case c == "freezer":
			_ = os.WriteFile(filepath.Join(dir, "freezer.state"), []byte("THAWED"), 0o644)
		}
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			owner, _, _ := strings.Cut(strings.TrimPrefix(e.Name(), "x"), "-")
			if !e.IsDir() || (owner != l.owner && alive(owner)) {
				continue
			}
			exec := filepath.Join(dir, e.Name())
			killed = append(killed, groupPids(exec)...)
			killCgroup(exec, v2)
		}
		_ = os.Remove(dir) // only when no command of a live worker is in it
	}
	return killed
}
