package sandbox

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Networks: a sandbox's commands share one network namespace, made when
// its first command starts and kept while it is used: loopback only
// offline; online, slirp4netns attached once (host loopback disabled) and
// unreachable routes for the private ranges and the host's addresses added
// once (an address the host gains later is added before the next command
// starts). factoryd holds the namespace by an open descriptor, not by a
// process or a mount: it disappears with factoryd (and slirp4netns with it,
// Pdeathsig), so a restarted worker makes it again on first use. A command
// joins it on an OS thread of its own that enters the namespace (setns),
// forks bwrap and waits for it: bwrap needs no --unshare-net, nothing
// polls. The namespace belongs to the host's user namespace, so a step
// (root at most in its own user namespace) cannot change its routes.
//
// factoryd adds the unreachable routes itself, over a netlink socket
// opened inside the namespace by the thread that made it (a socket stays
// in the namespace it was opened in, whichever thread uses it): no
// nsenter or ip is run, and no thread that goes on running other
// goroutines ever changes namespace. If a route cannot be added, the
// command fails (its sandbox is never left reachable).
//
// Two kinds of commands get a namespace of their own, made and dropped
// with them: those that reach worker Services (their forwarder listens on
// the command's own 127.0.0.1, which no other command may share) and those
// that ask for the network in an offline sandbox (sources, setup scripts).

// netIdle is how long a sandbox's namespace is kept without commands
// before Reap drops it (it is made again on the next command).
const netIdle = 5 * time.Minute

// sandboxNet is a network namespace for a sandbox's commands.
type sandboxNet struct {
	ns     *os.File        // /proc/<tid>/ns/net of the thread that made it
	nl     *netlink.Handle // online: a NETLINK_ROUTE socket in it
	stop   func()          // ends slirp4netns (online) and waits for it
	kill   func()          // kills slirp4netns (online) without waiting
	slirp  int             // its pid
	online bool

	mu       sync.Mutex
	blocked  map[string]bool // destinations (CIDR) with an unreachable route
	users    int             // commands running in it
	lastUsed time.Time
}

// netEntry is a sandbox's shared namespace in Local.nets.
type netEntry struct {
	ready chan struct{} // closed once made (n or err set)
	n     *sandboxNet
	err   error
}

// made waits for the entry's namespace (nil if it could not be made).
func (e *netEntry) made() *sandboxNet {
	<-e.ready
	return e.n
}

// makeNet makes a network namespace with its loopback up and, online,
// slirp4netns attached and the host out of reach. env is slirp4netns's
// environment (the sandbox's marker).
func makeNet(online bool, env []string) (*sandboxNet, error) {
	n := &sandboxNet{online: online, blocked: map[string]bool{}, stop: func() {}, kill: func() {}}
	done := make(chan error, 1)
	onOwnThread(func() { // the thread ends with the goroutine, leaving the namespace
		if err := syscall.Unshare(syscall.CLONE_NEWNET); err != nil {
			done <- fmt.Errorf("new network namespace: %w", err)
			return
		}
		if err := loopbackUp(); err != nil {
			done <- fmt.Errorf("bring up the loopback interface: %w", err)
			return
		}
		f, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", syscall.Gettid()))
		if err != nil {
			done <- err
			return
		}
		if online {
			h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
			if err != nil {
				f.Close()
				done <- fmt.Errorf("netlink socket in the sandbox's network namespace: %w", err)
				return
			}
			n.nl = h
		}
		n.ns = f
		done <- nil
	})
	if err := <-done; err != nil {
		return nil, err
	}
	if !online {
		return n, nil
	}
	if err := n.attachSlirp(env); err != nil {
		n.close()
		return nil, err
	}
	if err := n.blockHost(); err != nil {
		n.close()
		return nil, err
	}
	return n, nil
}

// attachSlirp starts slirp4netns on the namespace and waits until it has
// configured it. slirp4netns is started, and waited for, by a thread that
// lives as long as it does (Pdeathsig follows the forking thread).
func (n *sandboxNet) attachSlirp(env []string) error {
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer readyR.Close()
	slirp := exec.Command("slirp4netns", "--configure", "--mtu=65520", "--disable-host-loopback", "--enable-seccomp",
		"--ready-fd=3", "--netns-type=path", "/proc/self/fd/4", "tap0")
	slirp.ExtraFiles = []*os.File{readyW, n.ns}
	slirp.Env = env
	serr := &headWriter{max: 4096} // it lives as long as the sandbox: keep its first words only
	slirp.Stderr = serr
	slirp.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	wait, err := startOnThread(slirp, nil, nil, nil)
	readyW.Close()
	if err != nil {
		return fmt.Errorf("slirp4netns: %w", err)
	}
	waitc := wait()
	n.slirp = slirp.Process.Pid
	// Not reaped before stop releases its waiter, so its pid stays its own.
	n.kill = func() { _ = slirp.Process.Kill() }
	var once sync.Once
	n.stop = func() {
		once.Do(func() {
			_ = slirp.Process.Kill()
			<-waitc
		})
	}
	_ = readyR.SetReadDeadline(time.Now().Add(30 * time.Second))
	if k, err := readyR.Read(make([]byte, 1)); k != 1 {
		n.stop()
		return fmt.Errorf("slirp4netns: %v: %s", err, strings.TrimSpace(serr.String())) // its output is complete once it is waited for
	}
	return nil
}

// headWriter keeps the first max bytes written to it.
type headWriter struct {
	max int
	buf bytes.Buffer
}

func (w *headWriter) Write(p []byte) (int, error) {
	if room := w.max - w.buf.Len(); room > 0 {
		w.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (w *headWriter) String() string { return w.buf.String() }

// blockHost makes the private ranges and every address the host has now
// unreachable in the namespace (once each). A route it added stays
// recorded even if a later one fails: the next call adds only the rest.
func (n *sandboxNet) blockHost() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.nl == nil {
		return fmt.Errorf("block the host's addresses in the sandbox: its network is closed")
	}
	var dsts []*net.IPNet
	for _, r := range blockedRanges {
		_, dst, err := net.ParseCIDR(r)
		if err != nil {
			return err
		}
		dsts = append(dsts, dst)
	}
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() {
			dsts = append(dsts, &net.IPNet{IP: ipn.IP.To4(), Mask: net.CIDRMask(32, 32)})
		}
	}
	for _, dst := range dsts {
		if n.blocked[dst.String()] {
			continue // already, or an address on two interfaces
		}
		if err := n.unreachable(dst); err != nil {
			return err
		}
		n.blocked[dst.String()] = true
	}
	return nil
}

// unreachable adds an unreachable route to dst in the namespace's main
// table: what `ip route add unreachable <dst>` adds (protocol boot, scope
// global; an existing route to dst is an error).
func (n *sandboxNet) unreachable(dst *net.IPNet) error {
	err := n.nl.RouteAdd(&netlink.Route{
		Dst:      dst,
		Type:     unix.RTN_UNREACHABLE,
		Table:    unix.RT_TABLE_MAIN,
		Protocol: unix.RTPROT_BOOT,
		Scope:    netlink.SCOPE_UNIVERSE,
	})
	if err != nil {
		return fmt.Errorf("block the host's addresses in the sandbox: netlink: route add unreachable %s: %w", dst, err)
	}
	return nil
}

// close ends slirp4netns and lets the namespace go (with the last process
// in it). It waits for a blockHost under way (which uses n.nl).
func (n *sandboxNet) close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.stop()
	if n.nl != nil {
		n.nl.Close()
		n.nl = nil
	}
	if n.ns != nil {
		n.ns.Close()
	}
}

// joinNet returns the namespace a command starts in (nil: the host's) and
// its release. A sandbox's shared namespace is made on first use.
func (l *Local) joinNet(sb Sandbox, p *execPlan, services int) (*sandboxNet, func(), error) {
	if !l.isolated() && !p.offline {
		return nil, func() {}, nil // isolation none, online: the host's network
	}
	env := []string{markerEnv + "=" + l.marker(sb.Name)}
	if services > 0 || p.offline == sb.InternetEnabled { // a namespace of its own
		n, err := makeNet(!p.offline, env)
		if err != nil {
			return nil, nil, err
		}
		return n, n.close, nil
	}
	n, err := l.sharedNet(sb.Name, !p.offline, env)
	if err != nil {
		return nil, nil, err
	}
	return n, func() {
		n.mu.Lock()
		n.users--
		n.lastUsed = l.Now()
		n.mu.Unlock()
	}, nil
}

// sharedNet returns a sandbox's shared namespace, made if needed, with one
// more user.
func (l *Local) sharedNet(name string, online bool, env []string) (*sandboxNet, error) {
	for {
		l.netmu.Lock()
		e := l.nets[name]
		mine := e == nil
		if mine {
			e = &netEntry{ready: make(chan struct{})}
			l.nets[name] = e
		}
		l.netmu.Unlock()
		if mine {
			if e.n, e.err = makeNet(online, env); e.err != nil {
				l.netmu.Lock()
				delete(l.nets, name)
				l.netmu.Unlock()
			} else {
				e.n.lastUsed = l.Now()
			}
			close(e.ready)
		}
		n := e.made()
		if n == nil {
			return nil, e.err
		}
		if n.online != online { // a sandbox of that name made again differently
			l.netmu.Lock()
			if l.nets[name] == e {
				delete(l.nets, name)
			}
			l.netmu.Unlock()
			continue
		}
		if online {
			if err := n.blockHost(); err != nil { // an address the host gained since
				return nil, err
			}
		}
		l.netmu.Lock()
		kept := l.nets[name] == e // not dropped meanwhile
		if kept {
			n.mu.Lock()
			n.users++
			n.mu.Unlock()
		}
		l.netmu.Unlock()
		if kept {
			return n, nil
		}
	}
}

// dropNet ends a sandbox's shared namespace (Delete).
func (l *Local) dropNet(name string) {
	l.netmu.Lock()
	e := l.nets[name]
	delete(l.nets, name)
	l.netmu.Unlock()
	if e != nil {
		if n := e.made(); n != nil {
			n.close()
		}
	}
}

// dropIdleNets ends the shared namespaces no command has used for netIdle.
func (l *Local) dropIdleNets(now time.Time) {
	l.netmu.Lock()
	var idle []*sandboxNet
	for name, e := range l.nets {
		select {
		case <-e.ready:
		default:
			continue // being made
		}
		n := e.n
		if n == nil {
			continue
		}
		n.mu.Lock()
		if n.users == 0 && now.Sub(n.lastUsed) >= netIdle {
			idle = append(idle, n)
			delete(l.nets, name)
		}
		n.mu.Unlock()
	}
	l.netmu.Unlock()
	for _, n := range idle {
		n.close()
	}
}

// Close ends every sandbox network this driver holds (and their
// slirp4netns) and removes the cgroups of its idle sandboxes (which would
// otherwise outlive the process: they go 2 s after a sandbox's last
// command). Commands still running keep theirs until they end.
func (l *Local) Close() {
	l.cgmu.Lock()
	l.closed = true
	l.cgmu.Unlock()
	l.ReleaseGroups()
	l.dropSpareDirs()
	l.netmu.Lock()
	nets := l.nets
	l.nets = map[string]*netEntry{}
	l.netmu.Unlock()
	for _, e := range nets {
		if n := e.made(); n != nil {
			n.close()
		}
	}
}

// startOnThread starts cmd from an OS thread of its own, in the network
// namespace ns (nil: this process's), and keeps that thread until cmd ends:
// Pdeathsig follows the forking thread, and the thread, having changed
// namespace, must not run anything else. wait lets the command be reaped
// and returns a channel that gets cmd.Wait's result; until it is called
// the command's pid stays valid. atStart, if not nil, runs on that thread
// right after the start (joinAtExec for a traced command); its error is
// startOnThread's, the command reaped. before, if not nil, runs on that
// thread first (stage.mount); its error is startOnThread's.
func startOnThread(cmd *exec.Cmd, ns *os.File, before func() error, atStart func(pid int) error) (wait func() <-chan error, err error) {
	return startOnLauncher(nil, cmd, ns, before, atStart, false)
}

// startOnLauncher is startOnThread on ln's thread (launcher.go), or on a
// thread of its own when ln is nil. With nnp the thread first sets
// no-new-privileges, which its children inherit: for good (a launcher's
// thread starts only sandbox commands, which all run with it; a thread of
// its own ends with its command).
func startOnLauncher(ln *launcher, cmd *exec.Cmd, ns *os.File, before func() error, atStart func(pid int) error, nnp bool) (wait func() <-chan error, err error) {
	started := make(chan error, 1)
	release := make(chan struct{})
	waitc := make(chan error, 1)
	run := func(f func() bool) { onOwnThread(func() { f() }) }
	if ln != nil {
		run = func(f func() bool) {
			if !ln.run(f) {
				started <- errors.New("the command's launcher was retired")
			}
		}
	}
	keep := keepsLauncher(before, atStart)
	// The job keeps the thread for another command only when it changed
	// nothing of the thread's own and its command started.
	run(func() bool {
		if before != nil {
			if err := before(); err != nil {
				started <- err
				return false
			}
		}
		if nnp {
			if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
				started <- fmt.Errorf("set no-new-privileges: %w", err)
				return false
			}
		}
		if ns != nil {
			if ln != nil {
				ln.netns = true // read by its owner after started
			}
			if err := setns(ns); err != nil {
				started <- fmt.Errorf("join the sandbox's network namespace: %w", err)
				return false
			}
		}
		if err := cmd.Start(); err != nil {
			started <- err
			return false
		}
		if atStart != nil {
			if err := atStart(cmd.Process.Pid); err != nil {
				_ = cmd.Wait()
				started <- err
				return false
			}
		}
		started <- nil
		<-release
		waitc <- cmd.Wait()
		return keep
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

// keepsLauncher tells whether a launcher's thread may start another
// command after starting one with these: it made no mount namespace of its
// own (before) and its command was not started traced (atStart). A thread
// that entered a sandbox's network namespace stays in it: it starts only
// commands that enter one too (launcher.netns).
func keepsLauncher(before func() error, atStart func(pid int) error) bool {
	return before == nil && atStart == nil
}

// setns moves the calling thread into the network namespace ns. The
// descriptor is used under the file's reference (Control): a Close
// meanwhile cannot let its number name another file.
func setns(ns *os.File) error {
	rc, err := ns.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.Setns(int(fd), unix.CLONE_NEWNET) }); err != nil {
		return err
	}
	return serr
}
