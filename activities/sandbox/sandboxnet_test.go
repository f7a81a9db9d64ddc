package sandbox

import (
	"context"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/linefactory/linefactory/internal/testwait"
	"github.com/linefactory/linefactory/manifests"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// netOf is the network namespace a command of the sandbox runs in, and the
// routes it sees.
func netOf(t *testing.T, l *Local, req ExecRequest) (ns, routes string) {
	t.Helper()
	req.Argv = []string{"readlink /proc/self/ns/net; ip route"}
	res, out := run(t, l, req)
	if res.ExitCode != 0 {
		t.Fatalf("exit %d: %s", res.ExitCode, out)
	}
	ns, routes, _ = strings.Cut(out, "\n")
	return ns, routes
}

// hostAddrs are the host's IPv4 addresses but loopback.
func hostAddrs(t *testing.T) []string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	var ips []string
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() {
			ips = append(ips, ipn.IP.String())
		}
	}
	return ips
}

// TestBlockHostNetlink: blockHost adds each unreachable route once (a
// second call adds nothing and succeeds), says which route it could not
// add and why, and fails once the network is closed.
func TestBlockHostNetlink(t *testing.T) {
	newIsolated(t) // skips where namespaces cannot be made
	n, err := makeNet(true, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer n.close()
	if err := n.blockHost(); err != nil {
		t.Fatalf("a second blockHost: %v", err)
	}
	routes, err := n.nl.RouteList(nil, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	unreachable := 0
	for _, r := range routes {
		if r.Type == unix.RTN_UNREACHABLE {
			unreachable++
		}
	}
	if want := len(blockedRanges) + len(hostAddrs(t)); unreachable != want || len(n.blocked) != want {
		t.Fatalf("%d unreachable routes, %d recorded, want %d: %v", unreachable, len(n.blocked), want, routes)
	}
	delete(n.blocked, "10.0.0.0/8") // as if not added: the kernel has it
	if err := n.blockHost(); err == nil || !strings.Contains(err.Error(), "route add unreachable 10.0.0.0/8: file exists") {
		t.Fatalf("adding an existing route: %v", err)
	}
	n.close()
	if err := n.blockHost(); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("blockHost after close: %v", err)
	}
}

// TestSandboxNetShared: a sandbox's commands share one network namespace
// (its private ranges unreachable from the first command on), which a
// step cannot change, even as root of its user namespace; commands that
// reach Services, and the network asked for by an offline sandbox's setup,
// get their own; Delete ends it and its slirp4netns.
func TestSandboxNetShared(t *testing.T) {
	l := newIsolated(t)
	sb := acquire(t, l, Spec{Name: "shared", InternetEnabled: true})
	first, routes := netOf(t, l, ExecRequest{Sandbox: sb.Name})
	want := []string{"default via 10.0.2.2"}
	for _, r := range blockedRanges {
		want = append(want, "unreachable "+r+" ")
	}
	for _, ip := range hostAddrs(t) {
		want = append(want, "unreachable "+ip+" ")
	}
	for _, r := range want {
		if !strings.Contains(routes, r) {
			t.Fatalf("the first command's routes lack %q:\n%s", r, routes)
		}
	}
	res, out := run(t, l, ExecRequest{Sandbox: sb.Name, User: "root", Argv: []string{
		"ip route del unreachable 10.0.0.0/8 || ip route replace 10.0.0.0/8 via 10.0.2.2 || ip link set lo down || ip link set tap0 down || exit 0; exit 7"}})
	if res.ExitCode != 0 {
		t.Fatalf("a root step changed the shared namespace's network: exit %d\n%s", res.ExitCode, out)
	}
	again, routes2 := netOf(t, l, ExecRequest{Sandbox: sb.Name})
	if again != first || routes2 != routes {
		t.Fatalf("second command: %s %q, want the first's %s %q", again, routes2, first, routes)
	}
	svc := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	own, _ := netOf(t, l, ExecRequest{Sandbox: sb.Name, Services: []Service{{Name: "s", Port: 9556, Handler: svc}}})
	if own == first {
		t.Fatalf("a command with services shares the sandbox's namespace %s", own)
	}

	off := acquire(t, l, Spec{Name: "shared-off", InternetEnabled: false})
	offNS, offRoutes := netOf(t, l, ExecRequest{Sandbox: off.Name})
	setupNS, setupRoutes := netOf(t, l, ExecRequest{Sandbox: off.Name, Network: true})
	if strings.TrimSpace(offRoutes) != "" || offNS == first || setupNS == offNS || !strings.Contains(setupRoutes, "default via") {
		t.Fatalf("offline %s %q, its setup %s %q (online sandbox: %s)", offNS, offRoutes, setupNS, setupRoutes, first)
	}
	if again, _ := netOf(t, l, ExecRequest{Sandbox: off.Name}); again != offNS {
		t.Fatalf("offline: %s then %s", offNS, again)
	}

	l.netmu.Lock()
	slirp := l.nets[sb.Name].n.slirp
	l.netmu.Unlock()
	if err := l.Delete(context.Background(), sb.Name); err != nil {
		t.Fatal(err)
	}
	// Killed by Delete, reaped in the background once the kernel has
	// removed its tap device.
	if !testwait.Until(10*time.Second, func() bool { return syscall.Kill(slirp, 0) != nil }) {
		t.Fatalf("slirp4netns (pid %d) outlived its sandbox", slirp)
	}
	l.netmu.Lock()
	_, kept := l.nets[sb.Name]
	l.netmu.Unlock()
	if kept {
		t.Fatal("Delete kept the sandbox's network")
	}
}

// TestSandboxNetRemade: a sandbox reused by another driver on the same
// root (a restarted worker) gets a new namespace, as closed off as the
// first; Reap drops a namespace idle for netIdle and the next command
// makes it again.
func TestSandboxNetRemade(t *testing.T) {
	l := newIsolated(t)
	sb := acquire(t, l, Spec{Name: "remade", InternetEnabled: true})
	before, routes := netOf(t, l, ExecRequest{Sandbox: sb.Name})
	l.Close()
	restarted, err := NewLocal(l.root)
	if err != nil {
		t.Fatal(err)
	}
	defer restarted.Close()
	after, routes2 := netOf(t, restarted, ExecRequest{Sandbox: sb.Name})
	if after == before || routes2 != routes {
		t.Fatalf("after a restart: %s %q, before %s %q", after, routes2, before, routes)
	}
	if _, err := restarted.Reap(context.Background(), time.Now().Add(netIdle)); err != nil {
		t.Fatal(err)
	}
	restarted.netmu.Lock()
	left := len(restarted.nets)
	restarted.netmu.Unlock()
	if left != 0 {
		t.Fatalf("Reap kept %d idle networks", left)
	}
	if again, routes3 := netOf(t, restarted, ExecRequest{Sandbox: sb.Name}); again == after || routes3 != routes {
		t.Fatalf("after Reap: %s %q", again, routes3)
	}
	if _, err := os.Stat(l.dir(sb.Name)); err != nil {
		t.Fatal(err)
	}
}

// TestSandboxNetAcrossLifecycle: an isolated sandbox keeps its network
// through a pause and the resume a command triggers; one provisioned from
// its snapshot gets a namespace of its own, as closed off; deleting the
// first leaves the second working.
func TestSandboxNetAcrossLifecycle(t *testing.T) {
	l := newIsolated(t)
	ctx := context.Background()
	sb := acquire(t, l, Spec{Name: "life", InternetEnabled: true, Lifecycle: &manifests.Lifecycle{AutoResume: "on_activity"}})
	if res, out := run(t, l, ExecRequest{Sandbox: sb.Name, Argv: []string{"echo kept > f"}}); res.ExitCode != 0 {
		t.Fatalf("exit %d: %s", res.ExitCode, out)
	}
	first, routes := netOf(t, l, ExecRequest{Sandbox: sb.Name})
	if err := l.Pause(ctx, sb.Name); err != nil {
		t.Fatal(err)
	}
	if again, routes2 := netOf(t, l, ExecRequest{Sandbox: sb.Name}); again != first || routes2 != routes {
		t.Fatalf("after pause and resume: %s %q, before %s %q", again, routes2, first, routes)
	}
	if _, err := l.Snapshot(ctx, sb.Name, "life-snap"); err != nil {
		t.Fatal(err)
	}
	copied := acquire(t, l, Spec{Name: "life-copy", InternetEnabled: true, SnapshotName: "life-snap"})
	if err := l.Delete(ctx, sb.Name); err != nil {
		t.Fatal(err)
	}
	ns, routes3 := netOf(t, l, ExecRequest{Sandbox: copied.Name})
	if ns == first || routes3 != routes {
		t.Fatalf("the snapshot's sandbox: %s %q, the original %s %q", ns, routes3, first, routes)
	}
	if res, out := run(t, l, ExecRequest{Sandbox: copied.Name, Argv: []string{"cat f"}}); res.ExitCode != 0 || strings.TrimSpace(out) != "kept" {
		t.Fatalf("exit %d: %q", res.ExitCode, out)
	}
}
