package sandbox

import (
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// Cgroups kept between commands. Making a sandbox's group (with its
// limits) and a command's child group in each hierarchy, and removing them
// when the command ends, cost about 1.2 ms of wall time (0.45 ms of CPU)
// per command on cgroup v1. So a command's group that its command left
// empty (no process, no child group: nothing to kill) is kept for the
// sandbox's next command, and a sandbox whose last command ended keeps its
// groups for cgroupLinger: the steps of a job, which follow each other
// within milliseconds, make them once. A group that held anything when its
// command ended is killed and removed as before, never reused. Delete
// removes them at once, like everything of the sandbox.

// cgroupLinger is how long an idle sandbox keeps its cgroups.
const cgroupLinger = 2 * time.Second

// groupPool is a sandbox's emptied command groups; l.cgmu guards it.
type groupPool struct {
	sb   Sandbox // whose groups (its cgroup name)
	free []*execGroup
	// timer removes the groups cgroupLinger after the last command ended;
	// a take stops it, and a timer that is no longer p.timer does nothing.
	timer *time.Timer
}

// takeGroup returns an emptied group of the sandbox's, or a new one
// (makeExecGroup); l.cgmu is held.
func (l *Local) takeGroup(sb Sandbox) (*execGroup, error) {
	if p := l.pools[sb.Name]; p != nil {
		if p.timer != nil {
			p.timer.Stop()
			p.timer = nil
		}
		for n := len(p.free); n > 0; n = len(p.free) {
			g := p.free[n-1]
			p.free = p.free[:n-1]
			if g.there() {
				return g, nil
			}
			g.kill() // removed behind the driver's back: not used
		}
	}
	if g := l.takeSpare(sb); g != nil {
		return g, nil
	}
	return makeExecGroup(sb, "x"+l.owner+"-"+strconv.FormatInt(execSeq.Add(1), 10))
}

// putGroup keeps a command's emptied group for the sandbox's next command
// and, when no command runs in the sandbox, removes its groups after
// cgroupLinger unless a command comes first; l.cgmu is held.
func (l *Local) putGroup(sb Sandbox, g *execGroup) {
	p := l.pools[sb.Name]
	if p == nil {
		p = &groupPool{sb: sb}
		l.pools[sb.Name] = p
	}
	if g != nil {
		p.free = append(p.free, g)
	}
	if l.busy(sb.Name) || p.timer != nil {
		return
	}
	var t *time.Timer
	t = time.AfterFunc(cgroupLinger, func() {
		l.cgmu.Lock()
		defer l.cgmu.Unlock()
		if l.pools[sb.Name] != p || p.timer != t {
			return // taken (or replaced) meanwhile
		}
		// Cleared even when a command runs now: its end schedules the
		// next one (a fired timer left in place kept any other from being
		// scheduled, and the groups forever).
		p.timer = nil
		if !l.busy(sb.Name) {
			l.dropGroupsLocked(sb)
		}
	})
	p.timer = t // the timer cannot run before l.cgmu is released
}

// dropGroupsLocked removes the sandbox's kept command groups and then its
// own groups unless a command is in them (removeIfIdle); l.cgmu is held.
func (l *Local) dropGroupsLocked(sb Sandbox) {
	l.dropHolder(sb.Name) // its group is in the sandbox's
	if p := l.pools[sb.Name]; p != nil {
		if p.timer != nil {
			p.timer.Stop()
		}
		for _, g := range p.free {
			g.kill()
		}
		delete(l.pools, sb.Name)
	}
	removeIfIdle(sb)
}

// ReleaseGroups removes at once the cgroups that sandboxes without a
// running command keep (cgroupLinger), and the spare groups: for a worker
// that stops.
func (l *Local) ReleaseGroups() {
	l.cgmu.Lock()
	defer l.cgmu.Unlock()
	l.dropSpares()
	for name, p := range l.pools {
		if !l.busy(name) {
			l.dropGroupsLocked(p.sb)
		}
	}
	l.hmu.Lock()
	idle := []string{}
	for name := range l.holders {
		if !l.busy(name) {
			idle = append(idle, name)
		}
	}
	l.hmu.Unlock()
	for _, name := range idle {
		l.dropHolder(name)
	}
}

// empty tells whether no process and no child group is in the group: its
// command left nothing behind and the group can run another. Each of the
// command's processes is in every hierarchy's group but the freezer's (a
// launcher forks it there, a shim or a traced start joins it to them all)
// and a step can neither take one out nor make a child group (isolated it
// sees no cgroup file system; without isolation it is as trusted as the
// host), so one directory tells, procsDir: its links and its
// cgroup.procs (checking all four hierarchies cost a command's end about
// 0.04 ms more; takeGroup still checks them all before the next command).
// A directory that cannot be read is not empty.
func (g *execGroup) empty() bool {
	if len(g.dirs) == 0 {
		return true
	}
	d := g.procsDir()
	var st syscall.Stat_t
	if err := syscall.Stat(d, &st); err != nil || st.Nlink != 2 {
		return false
	}
	procs, err := procsOf(filepath.Join(d, "cgroup.procs")) // a launcher leaving is not the command's
	return err == nil && len(procs) == 0
}

// procsDir is the directory whose cgroup.procs empty reads: the first
// that is not the freezer's (a launcher does not join that one, so its
// commands are not in it; Pause moves them to the sandbox's own).
func (g *execGroup) procsDir() string {
	if dirs := g.launcherDirs(); len(dirs) > 0 {
		return dirs[0]
	}
	return g.dirs[0]
}

// emptySoon is empty, asked again for up to about 6 ms while the group
// still holds processes: an isolated command's PID namespace ends after the
// bwrap process that reported the command's exit (its init outlives it by
// up to a millisecond on an idle host, several on a loaded one, where a
// bound of 0.75 ms had the group killed and made again), and a group it
// leaves empty by itself can run the sandbox's next command like any other.
// Nothing is killed here; a command that left a process running waits that
// much longer for its group's kill.
func (g *execGroup) emptySoon() bool {
	for pause := 50 * time.Microsecond; ; pause *= 2 {
		if g.empty() {
			return true
		}
		if pause > 3200*time.Microsecond || !g.there() {
			return false
		}
		time.Sleep(pause)
	}
}

// there tells whether each of the group's directories still exists without
// a child group (kernfs counts a directory's links as 2 + its child
// directories).
func (g *execGroup) there() bool {
	for _, d := range g.dirs {
		var st syscall.Stat_t
		if err := syscall.Stat(d, &st); err != nil || st.Nlink != 2 {
			return false
		}
	}
	return true
}
