package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Joining cgroup v1 groups at exec. A process cannot be cloned into a v1
// group; it has to write its pid into each group's cgroup.procs before the
// command runs. The shim (shimScript) does that from a shell, which costs a
// shell's start per command. When this process may trace its children (it
// is root, and ptrace is allowed here: traceJoinWorks), the command is
// started traced instead (PTRACE_TRACEME): the kernel stops it right after
// its execve, before its first instruction; the forking thread writes its
// pid into the groups, then detaches, and the command runs already inside
// them, as with the shim. A join that fails kills the command.

// traceJoinWorks tells, once per process, whether commands can be started
// traced (a traced `true` stops at its exec and is detached cleanly).
var traceJoinWorks = sync.OnceValue(func() bool {
	if os.Geteuid() != 0 {
		return false // v1 groups are root's; a traced setuid exec would lose its bit
	}
	path, err := exec.LookPath("true")
	if err != nil {
		return false
	}
	cmd := &exec.Cmd{Path: path, Args: []string{"true"}, SysProcAttr: &syscall.SysProcAttr{Ptrace: true}}
	wait, err := startOnThread(cmd, nil, nil, func(pid int) error { return joinAtExec(pid, nil) })
	if err != nil {
		return false
	}
	return <-wait() == nil
})

// traceJoin tells whether a command's group g is joined by tracing rather
// than by the shim.
func traceJoin(g *execGroup) bool { return g != nil && !g.v2 && !shimOnly && traceJoinWorks() }

// shimOnly makes every v1 join use the shim (tests of the fallback).
var shimOnly bool

// joinAtExec waits (on the thread that started it traced) for the command
// pid to stop at its exec, writes its pid into each of files, and lets it
// run. It never reaps the command: a command that ended before stopping is
// left for cmd.Wait. When a write fails the command is killed before it
// runs and the error is returned.
func joinAtExec(pid int, files []string) error {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WSTOPPED|unix.WNOWAIT, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			return fmt.Errorf("wait for the command's exec: %w", err)
		}
		break
	}
	if info.Code != cldTrapped && info.Code != cldStopped {
		return nil // it ended already: nothing of it can run
	}
	var joinErr error
	for _, f := range files {
		if err := os.WriteFile(f, []byte(fmt.Sprint(pid)), 0o644); err != nil {
			joinErr = fmt.Errorf("join %s: %w", f, err)
			_ = syscall.Kill(pid, syscall.SIGKILL)
			break
		}
	}
	// The stop at exec is a SIGTRAP of the tracing itself: not passed on.
	sig := siginfoStatus(&info)
	if sig == int(syscall.SIGTRAP) {
		sig = 0
	}
	if err := syscall.PtraceDetach(pid); err != nil && joinErr == nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		return fmt.Errorf("let the command run: %w", err)
	}
	if sig != 0 && joinErr == nil {
		_ = syscall.Kill(pid, syscall.Signal(sig))
	}
	return joinErr
}

// si_code values of a SIGCHLD siginfo (linux/signal.h).
const (
	cldStopped = 5
	cldTrapped = 4
)

// siginfoStatus is si_status of a SIGCHLD siginfo: the stopping signal of a
// stopped child (after si_pid and si_uid in the union, at byte 24).
func siginfoStatus(info *unix.Siginfo) int {
	raw := (*[unsafe.Sizeof(unix.Siginfo{})]byte)(unsafe.Pointer(info))
	return int(*(*int32)(unsafe.Pointer(&raw[24])))
}
