// Package ports hands out free loopback TCP ports to servers that bind them
// later: the embedded Temporal's services, and the daemons tests start.
//
// A port that is free when it is chosen can be taken before its server binds
// it. Three things keep that from happening between our own processes:
//   - ports are drawn below the kernel's ephemeral range, which outgoing
//     connections take their local ports from;
//   - a process never hands out the same port twice;
//   - a port handed out is claimed for ClaimFor in a directory every process
//     of this user shares (a file per port, under a lock), so that two
//     processes starting at the same moment (a test and the daemons it
//     spawns, parallel test binaries) do not pick the same port. Without the
//     directory (not ours, not private) only the first two hold.
//
// A port claimed but never bound is skipped by other processes for
// ClaimFor; the claims file holds only live claims (a few hundred lines at
// most), so nothing accumulates.
package ports

import (
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ClaimFor is how long a port handed out stays claimed for other processes:
// ample for a server to start and bind it.
const ClaimFor = 2 * time.Minute

var (
	mu     sync.Mutex
	handed = map[int]bool{}
	// claimDir is the shared directory of claims; tests point it elsewhere.
	claimDir = filepath.Join(os.TempDir(), fmt.Sprintf("linefactory-ports-%d", os.Getuid()))
)

// Free returns a loopback TCP port that is free now, that this process has
// not handed out before and that no other process of this user claimed in
// the last ClaimFor. Falls back to the kernel's choice when the range below
// the ephemeral ports has nothing left.
func Free() (int, error) {
	mu.Lock()
	defer mu.Unlock()
	low := ephemeralLow()
	reg := openRegistry(claimDir)
	defer reg.close()
	for range 500 {
		port := 10000 + mrand.IntN(max(low-10000, 1))
		if handed[port] || !reg.claim(port) {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		l.Close()
		handed[port] = true
		return port, nil
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	handed[port] = true
	return port, nil
}

// ephemeralLow is the first port of the kernel's ephemeral range.
func ephemeralLow() int {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(data)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 11000 {
				return n
			}
		}
	}
	return 32768
}

// registry is the claims file, locked for one Free: a line "port unix-nanos"
// per claim younger than ClaimFor (older ones are dropped when it is
// written). A nil registry claims everything (no directory to share).
type registry struct {
	file   *os.File
	claims map[int]int64
	now    time.Time
}

// openRegistry makes dir (private to this user), locks its claims file and
// reads it; nil when dir cannot serve: it exists but is not a directory
// this user owns and alone may write, or the file cannot be opened or
// locked.
func openRegistry(dir string) *registry {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil
	}
	fi, err := os.Lstat(dir)
	if err != nil || !fi.IsDir() || fi.Mode().Perm()&0o077 != 0 {
		return nil
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Getuid() {
		return nil
	}
	f, err := os.OpenFile(filepath.Join(dir, "claims"), os.O_CREATE|os.O_RDWR|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil
	}
	r := &registry{file: f, claims: map[int]int64{}, now: time.Now()}
	data, _ := io.ReadAll(f)
	for line := range strings.Lines(string(data)) {
		p, a, _ := strings.Cut(strings.TrimSpace(line), " ")
		port, err1 := strconv.Atoi(p)
		at, err2 := strconv.ParseInt(a, 10, 64)
		if err1 == nil && err2 == nil && r.now.Sub(time.Unix(0, at)) < ClaimFor {
			r.claims[port] = at
		}
	}
	return r
}

// claim records port as handed out now, unless it is claimed already.
func (r *registry) claim(port int) bool {
	if r == nil {
		return true
	}
	if _, ok := r.claims[port]; ok {
		return false
	}
	r.claims[port] = r.now.UnixNano()
	return true
}

// close writes the live claims back and drops the lock.
func (r *registry) close() {
	if r == nil {
		return
	}
	var b strings.Builder
	for port, at := range r.claims {
		fmt.Fprintf(&b, "%d %d\n", port, at)
	}
	if err := r.file.Truncate(0); err == nil {
		_, _ = r.file.WriteAt([]byte(b.String()), 0)
	}
	_ = r.file.Close() // drops the lock
}
