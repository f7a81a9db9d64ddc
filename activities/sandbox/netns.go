package sandbox

import (
	"fmt"
	goruntime "runtime"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// netnsWorks is set once this process has made a network namespace: a
// host that could stays able to, and an offline sandbox's provisioning
// need not make and drop one more (about 3 ms) to ask again. A failure is
// not kept: the next provisioning asks again.
var netnsWorks atomic.Bool

// checkNetns tells whether this process can make a network namespace with
// its loopback up.
func checkNetns() error {
	if netnsWorks.Load() {
		return nil
	}
	n, err := makeNet(false, nil)
	if err != nil {
		return err
	}
	n.close()
	netnsWorks.Store(true)
	return nil
}

// A namespace made by the clone flags has its loopback down, and nothing
// can run in the child between fork and exec to bring it up (nor may we
// rely on iproute2 being installed). So makeNet moves a dedicated OS thread
// to a new namespace, sets "lo" up there with an ioctl and keeps a
// descriptor of the namespace; that thread then exits with its goroutine.
// Threads the runtime starts meanwhile come from its template thread, not
// from this one.

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
