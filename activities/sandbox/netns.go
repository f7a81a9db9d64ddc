package sandbox

import (
	"fmt"
	"os/exec"
	goruntime "runtime"
	"sync"
	"syscall"
	"unsafe"
)

// checkNetns tells whether this process can start a command in a new
// network namespace with its loopback up.
func checkNetns() error {
	cmd := exec.Command("/bin/true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	wait, err := startOffline(cmd)
	if err != nil {
		return err
	}
	return <-wait()
}

// startOffline starts cmd in a new network namespace whose only interface,
// the loopback, is up. wait lets the command be reaped and returns a channel
// that gets cmd.Wait's result; until it is called the command's pid stays
// valid (so that it can join cgroups).
//
// A namespace made by the clone flags has its loopback down, and nothing can
// run in the child between fork and exec to bring it up (nor may we rely on
// iproute2 being installed). So a dedicated OS thread moves to a new
// namespace, sets "lo" up there with an ioctl and forks the command, which
// inherits the thread's namespace. That thread never runs other goroutines:
// it stays locked until the command ends (Pdeathsig fires when the forking
// thread exits) and then exits with its goroutine, taking the namespace
// with it. Threads the runtime starts meanwhile come from its template
// thread, not from this one.
func startOffline(cmd *exec.Cmd) (wait func() <-chan error, err error) {
	started := make(chan error, 1)
	release := make(chan struct{})
	waitc := make(chan error, 1)
	onOwnThread(func() {
		if err := syscall.Unshare(syscall.CLONE_NEWNET); err != nil {
			started <- fmt.Errorf("new network namespace: %w", err)
			return
		}
		if err := loopbackUp(); err != nil {
			started <- fmt.Errorf("bring up the loopback interface: %w", err)
			return
		}
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		<-release
		waitc <- cmd.Wait()
	})
	if err := <-started; err != nil {
		return nil, err
	}
	var once sync.Once
	return func() <-chan error {
		once.Do(func() { close(release) })
		return waitc
	}, nil
}

// onOwnThread runs f in a new goroutine locked to an OS thread that is not
// the main one, and ends that thread when f returns (f may change the
// thread's state). The main thread is avoided because the runtime cannot
// end it (it would keep f's state and stay parked), and /proc/self shows
// its namespaces as the process's.
func onOwnThread(f func()) {
	go func() {
		goruntime.LockOSThread()
		if syscall.Gettid() != syscall.Getpid() {
			f() // returns locked: the thread ends with the goroutine
			return
		}
		// On the main thread: while it is locked to this goroutine, a new
		// goroutine that locks itself is on another thread.
		locked := make(chan struct{})
		go func() {
			goruntime.LockOSThread()
			close(locked)
			f()
		}()
		<-locked
		goruntime.UnlockOSThread()
	}()
}

// loopbackUp sets "lo" up in the calling thread's network namespace.
func loopbackUp() error {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	defer syscall.Close(fd)
	// struct ifreq: the name, then a union (ifr_flags) padded to 24 bytes.
	var ifr struct {
		name  [syscall.IFNAMSIZ]byte
		flags uint16
		_     [22]byte
	}
	copy(ifr.name[:], "lo")
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.SIOCGIFFLAGS, uintptr(unsafe.Pointer(&ifr))); errno != 0 {
		return fmt.Errorf("SIOCGIFFLAGS lo: %w", errno)
	}
	ifr.flags |= syscall.IFF_UP
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.SIOCSIFFLAGS, uintptr(unsafe.Pointer(&ifr))); errno != 0 {
		return fmt.Errorf("SIOCSIFFLAGS lo: %w", errno)
	}
	return nil
}
