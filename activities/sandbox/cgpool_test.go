package sandbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/linefactory/linefactory/internal/testwait"
)

// memoryGroup is the memory cgroup a command reports for itself
// (/proc/self/cgroup), or its unified group on cgroup v2.
func memoryGroup(t *testing.T, l *Local, sb string) string {
	t.Helper()
	res, out := run(t, l, ExecRequest{Sandbox: sb, Argv: []string{"cat /proc/self/cgroup"}})
	if res.ExitCode != 0 {
		t.Fatalf("cat /proc/self/cgroup: exit %d: %s", res.ExitCode, out)
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) == 3 && (f[1] == "memory" || f[0] == "0" && f[1] == "") {
			return f[2]
		}
	}
	t.Fatalf("no memory group in %q", out)
	return ""
}

// A command's group that its command left empty runs the sandbox's next
// command; one that held a leftover is killed and removed, never used
// again; concurrent commands each have their own; an idle sandbox's groups
// go within cgroupLinger, and Delete removes them at once.
func TestCommandGroupsKeptOnlyEmpty(t *testing.T) {
	if len(controllers()) == 0 || os.Geteuid() != 0 {
		t.Skip("SKIPPING: no writable cgroups")
	}
	l := newLocal(t)
	sb := acquire(t, l, Spec{Name: "pool", InternetEnabled: true, MemoryMB: 256})
	first := memoryGroup(t, l, sb.Name)
	if !strings.Contains(first, "/"+cgroupParent+"/"+sb.CgroupName+"/x") {
		t.Fatalf("the command ran in %q, not in a group of its own under its sandbox's", first)
	}
	if again := memoryGroup(t, l, sb.Name); again != first {
		t.Fatalf("the second command ran in %q, not in the first's emptied group %q", again, first)
	}

	// a command that leaves a process behind: its group is killed and removed
	marker := "sleep " + strconv.Itoa(2000+os.Getpid()%100000)
	res, out := run(t, l, ExecRequest{Sandbox: sb.Name, Argv: []string{"setsid sh -c 'exec " + marker + "' >/dev/null 2>&1 < /dev/null & cat /proc/self/cgroup"}})
	if res.ExitCode != 0 {
		t.Fatalf("exit %d: %s", res.ExitCode, out)
	}
	if pids := hostPids(marker); len(pids) > 0 {
		t.Fatalf("the leftover %v outlived its command", pids)
	}
	if !strings.Contains(out, first) {
		t.Fatalf("the leaving command did not run in the kept group %q: %s", first, out)
	}
	if _, err := os.Stat(cgroupRoot + "/memory" + first); !os.IsNotExist(err) && !cgroupV2() {
		t.Fatalf("the group that held a leftover is still there: %v", err)
	}
	if next := memoryGroup(t, l, sb.Name); next == first {
		t.Fatalf("a command ran in the group that held a leftover: %q", next)
	}

	// concurrent commands: a group each
	var wg sync.WaitGroup
	groups := make([]string, 3)
	for i := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var b strings.Builder
			_, err := l.Exec(context.Background(), ExecRequest{Sandbox: sb.Name, Argv: []string{"sleep 0.3; grep memory /proc/self/cgroup"}, Stdout: &b})
			if err != nil {
				t.Error(err)
			}
			groups[i] = b.String()
		}()
	}
	wg.Wait()
	if groups[0] == groups[1] || groups[1] == groups[2] || groups[0] == groups[2] {
		t.Fatalf("concurrent commands shared a group: %q", groups)
	}

	// idle: gone within cgroupLinger
	if !testwait.Until(cgroupLinger+10*time.Second, func() bool { return len(ourGroups(l.groupPrefix)) == 0 }) {
		t.Fatalf("an idle sandbox kept its cgroups: %v\n%s", ourGroups(l.groupPrefix), describeGroups(sb))
	}
	// Delete: at once
	memoryGroup(t, l, sb.Name)
	if len(ourGroups(l.groupPrefix)) == 0 {
		t.Fatal("a sandbox that just ran a command has no cgroup kept")
	}
	if err := l.Delete(context.Background(), sb.Name); err != nil {
		t.Fatal(err)
	}
	if left := ourGroups(l.groupPrefix); len(left) > 0 {
		t.Fatalf("cgroups left after Delete: %v", left)
	}
}

// describeGroups lists what is left of a sandbox's groups: each directory
// with the pids and thread ids in it (for a failure's message).
func describeGroups(sb Sandbox) string {
	var b strings.Builder
	for _, d := range sandboxGroups(sb) {
		_ = filepath.WalkDir(d, func(p string, e os.DirEntry, err error) error {
			if err == nil && e.IsDir() {
				procs, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
				tasks, _ := os.ReadFile(filepath.Join(p, "tasks"))
				fmt.Fprintf(&b, "%s procs=%q tasks=%q\n", p, strings.TrimSpace(string(procs)), strings.TrimSpace(string(tasks)))
			}
			return nil
		})
	}
	fmt.Fprintf(&b, "this process %d", os.Getpid())
	return b.String()
}

// A linger timer that fires while a command runs (one that started after
// the last command's end scheduled it) does not keep the next end from
// scheduling another: the idle sandbox's groups still go.
func TestLingerAfterABusyTimer(t *testing.T) {
	if len(controllers()) == 0 || os.Geteuid() != 0 {
		t.Skip("SKIPPING: no writable cgroups")
	}
	l := newLocal(t)
	sb := acquire(t, l, Spec{Name: "linger"})
	memoryGroup(t, l, sb.Name) // its end schedules the drop
	const pgid = -12345        // a command that runs when the timer fires
	l.track(sb.Name, pgid, true)
	time.Sleep(cgroupLinger + 500*time.Millisecond)
	if len(ourGroups(l.groupPrefix)) == 0 {
		t.Fatal("the groups went while a command ran")
	}
	l.track(sb.Name, pgid, false) // it ends (release)
	l.cgmu.Lock()
	l.putGroup(sb, nil)
	l.cgmu.Unlock()
	if !testwait.Until(cgroupLinger+5*time.Second, func() bool { return len(ourGroups(l.groupPrefix)) == 0 }) {
		t.Fatalf("an idle sandbox kept its cgroups: %v\n%s", ourGroups(l.groupPrefix), describeGroups(sb))
	}
}
