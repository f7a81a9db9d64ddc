package sandbox

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Namespaces kept between a sandbox's commands (isolation bwrap). Starting
// bwrap (its user namespace, mounts, PID namespace) is most of an isolated
// command's cost: about 5 ms of a `true` that otherwise takes 1.5. When a
// command is told another follows soon (ExecRequest.NextSoon: a job's
// next step), a holder is made beside it: a bwrap with the same mounts
// whose command only waits (its PID namespace's init, an exec-only sleep:
// see makeHolder), in a cgroup of the sandbox's of its own, with
// factoryd's variables only. The sandbox's next commands with the same
// mounts, one at a time, enter the
// holder's user, mount, PID, IPC, UTS and cgroup namespaces with nsenter
// (started by factoryd, as root, from the command's cgroup and network
// namespace, which it keeps) as the step's user, with no capability and
// no-new-privileges, instead of starting a bwrap each. The namespaces are
// those the holder had when it was ready, held open by factoryd; a step
// cannot signal, trace or read the holder, and a holder that ended is not
// used again.
//
// A command whose mounts differ (read-only files, other binds, service
// sockets: agent steps and steps with services), that runs as root of the
// sandbox, or that comes while another is entered starts a bwrap of its
// own as before. The holder ends with the sandbox's kept groups (cgroupLinger
// after its last command, at once on Delete).

// holder is a sandbox's kept namespaces; l.hmu guards l.holders.
type holder struct {
	key  string
	root fileID // the workspace directory it binds, as it was
	r    *running
	// ns are the holder's namespaces, opened when it was ready; closed once
	// it ended and no command is starting with them (refs).
	ns    []*os.File
	done  chan struct{} // closed when its bwrap was reaped
	mu    sync.Mutex
	refs  int
	ended bool
}

// holderNamespaces are the namespaces a command enters, as nsenter's
// options and /proc/<pid>/ns names.
var holderNamespaces = [][2]string{{"--user", "user"}, {"--mount", "mnt"}, {"--pid", "pid"},
	{"--ipc", "ipc"}, {"--uts", "uts"}, {"--cgroup", "cgroup"}}

// holderReady bounds how long a holder may take to start.
const holderReady = 5 * time.Second

type fileID struct{ dev, ino uint64 }

func idOf(path string) (fileID, bool) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return fileID{}, false
	}
	return fileID{dev: st.Dev, ino: st.Ino}, true
}

// nsenterPath is util-linux's nsenter when it can set the working
// directory inside the namespaces (--wdns, 2.38) and coreutils' env is
// there to give the command its environment and the holder its ignored
// SIGCHLD (enterEnv, --ignore-signal: 9.0), else "": no holders.
var nsenterPath = sync.OnceValue(func() string {
	path, err := exec.LookPath("nsenter")
	if err != nil {
		return ""
	}
	if st, err := os.Stat(enterEnv); err != nil || st.Mode()&0o111 == 0 {
		return ""
	}
	if out, _ := exec.Command(enterEnv, "--help").CombinedOutput(); !strings.Contains(string(out), "--ignore-signal") {
		return "" // coreutils 9.0: the holder's SIGCHLD
	}
	out, _ := exec.Command(path, "--help").CombinedOutput()
	if !strings.Contains(string(out), "--wdns") {
		return ""
	}
	return path
})

// holderKey is what a command's mounts are made from, or "" when the
// command cannot enter a holder: it reads host files, binds other
// directories or reaches services, runs as root of the sandbox, or without
// cgroups (whatever it left behind would outlive it in the holder's PID
// namespace), or the host has no suitable nsenter.
func (l *Local) holderKey(sb Sandbox, p *execPlan, r *running) string {
	if !l.isolated() || r.group == nil || len(p.readOnly) > 0 || len(p.binds) > 1 || len(p.sockets) > 0 || p.services > 0 ||
		len(p.argv) == 0 || strings.Contains(p.argv[0], "=") || // env would take a NAME=VALUE command for a variable
		p.uid == 0 || nsenterPath() == "" {
		// Root of the sandbox's user namespace keeps that namespace's
		// capabilities through execve, which bwrap drops: it gets its own.
		return ""
	}
	if len(p.binds) == 1 && p.binds[0] != [2]string{sb.Root, insideRoot} {
		return ""
	}
	h := sha256.New()
	for _, s := range []string{strconv.Itoa(p.uid), string(p.passwd), string(p.group), sb.Root, l.tmpDir(sb.Name)} {
		fmt.Fprintf(h, "%d:%s;", len(s), s)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// holderFor returns the sandbox's live holder for key, referenced (the
// caller releases it), or nil: none, another key, ended, or in use.
func (l *Local) holderFor(sb Sandbox, key string) *holder {
	if key == "" {
		return nil
	}
	l.hmu.Lock()
	h := l.holders[sb.Name]
	l.hmu.Unlock()
	if h == nil || h.key != key {
		return nil
	}
	if id, ok := idOf(sb.Root); !ok || id != h.root {
		l.endHolder(sb.Name, h) // the workspace was replaced: its bind is stale
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ended {
		// Ended before it was kept (endHolder found it not yet the
		// sandbox's): forgotten now, so that another can be made.
		l.hmu.Lock()
		if l.holders[sb.Name] == h {
			delete(l.holders, sb.Name)
		}
		l.hmu.Unlock()
		return nil
	}
	if h.refs > 0 {
		// Another command of the sandbox runs in it (two runs sharing an
		// ensure'd sandbox, say): this one starts its own bwrap, so that
		// commands running at once never share a PID namespace, where the
		// same uid could signal or trace the other, as with a bwrap each.
		return nil
	}
	h.refs++
	return h
}

// release drops a command's reference; the last one after the holder
// ended closes its namespaces.
func (h *holder) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.refs--
	h.closeIfDone()
}

// closeIfDone closes the namespaces once the holder ended and no command
// uses their descriptors' numbers; h.mu is held.
func (h *holder) closeIfDone() {
	if !h.ended || h.refs > 0 {
		return
	}
	for _, f := range h.ns {
		f.Close()
	}
	h.ns = nil
}

// enterEnv gives an entered command its environment: nsenter runs as root
// on the host until it enters the namespaces, so it gets none of the
// step's variables (LD_PRELOAD, GCONV_PATH, LC_ALL… would choose what a
// root process loads from the host, the sandbox's own files included);
// `env -i` sets them once nsenter became the step's user inside, where they
// reach only the step's own processes, as under a bwrap of its own. A step
// whose variables are all factoryd's own and SVC_* ones (its params, its
// output and artifacts files: names no loader, C library or nsenter reads)
// needs no env: nsenter passes them on itself.
const enterEnv = "/usr/bin/env"

// envForRoot tells whether p's environment may be given to a process that
// runs as root on the host: factoryd's own variables, and others only
// named SVC_*.
func (p *execPlan) envForRoot() bool {
	for _, kv := range p.env[p.ownEnv:] {
		if !strings.HasPrefix(kv, "SVC_") {
			return false
		}
	}
	return true
}

// startEntered starts a command in h's namespaces: nsenter, as root with
// the step's environment only when envForRoot allows it (else PATH alone),
// opens them from this process's descriptors (/proc/<pid>/fd/<n>, which a
// step cannot reach), becomes the step's user (its capabilities gone with
// its root) in the command's working directory, and forks into the PID
// namespace the command, or env, which sets the command's environment and
// execs it. It runs in the command's cgroup and network namespace as bwrap
// would, in a session of its own, with no-new-privileges.
func (l *Local) startEntered(p *execPlan, r *running, h *holder, n *sandboxNet, stdout, stderr *os.File) error {
	nsenter := nsenterPath()
	self := os.Getpid()
	argv := []string{nsenter}
	for i, ns := range holderNamespaces {
		argv = append(argv, fmt.Sprintf("%s=/proc/%d/fd/%d", ns[0], self, h.ns[i].Fd()))
	}
	id := strconv.Itoa(p.uid)
	argv = append(argv, "--setuid="+id, "--setgid="+id, "--wdns="+p.insideDir, "--")
	env := p.env
	if !p.envForRoot() {
		argv = append(append(argv, enterEnv, "-i", "--"), p.env...)
		env = []string{"PATH=/usr/bin:/bin"}
	}
	argv = append(argv, p.argv...)
	path := nsenter
	if r.group.needsShim() {
		argv, path = shim(r.group.procsFiles(), argv), "/bin/sh"
	}
	cmd := &exec.Cmd{Path: path, Args: argv, Dir: "/", Env: env, Stdout: stdout, Stderr: stderr,
		SysProcAttr: &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}}
	r.entered = true
	return startIn(cmd, n, r, p.argv[0], nil)
}

// makeHolder starts a holder for the sandbox's commands with p's mounts
// in the background, unless it has one; the commands that come before it
// is ready start their own bwrap.
func (l *Local) makeHolder(sb Sandbox, p *execPlan, n *sandboxNet, key string) {
	l.hmu.Lock()
	if l.holders[sb.Name] != nil || l.holding[sb.Name] {
		l.hmu.Unlock()
		return
	}
	l.holding[sb.Name] = true
	l.hmu.Unlock()
	bin, err := l.holdBinary()
	if err != nil {
		l.hmu.Lock()
		delete(l.holding, sb.Name)
		l.hmu.Unlock()
		return
	}
	// The holder is its PID namespace's init (a step's signals do not reach
	// it), ignores SIGCHLD (env sets it; it survives exec: the orphans it
	// inherits are reaped by the kernel) and runs a sleep its user cannot read, which
	// makes it non-dumpable: a step can neither trace it nor read its memory
	// or environment, so nothing of a step outlives it there.
	hp := *p
	hp.argv = []string{"/bin/sh", "-c", `echo; exec "$0" --ignore-signal=CHLD -- "$1" infinity`, enterEnv, bin}
	hp.readOnly = []string{bin}
	hp.asPid1 = true
	// factoryd's own variables only (its marker lets a restarted worker
	// reap it): the later steps, which see the holder's processes, never
	// read this step's variables in its environ.
	hp.env = slices.Clone(p.env[:p.ownEnv])
	go func() {
		h, err := l.startHolder(sb, &hp, n, key)
		// Kept only while the sandbox keeps its groups: one made after
		// they were dropped (its last command ended, or Delete) would
		// outlive them. l.cgmu before l.hmu, as dropGroupsLocked takes them.
		l.cgmu.Lock()
		l.hmu.Lock()
		delete(l.holding, sb.Name)
		kept := err == nil && !l.closed && l.holders[sb.Name] == nil && (l.pools[sb.Name] != nil || l.busy(sb.Name))
		if kept {
			l.holders[sb.Name] = h
		}
		l.hmu.Unlock()
		l.cgmu.Unlock()
		if err == nil && !kept {
			l.endHolder(sb.Name, h)
		}
	}()
}

// startHolder starts a holder and waits until its command runs (its
// mounts are made), then opens its namespaces.
func (l *Local) startHolder(sb Sandbox, p *execPlan, n *sandboxNet, key string) (*holder, error) {
	root, ok := idOf(sb.Root)
	if !ok {
		return nil, errors.New("no workspace")
	}
	l.cgmu.Lock()
	g, err := makeExecGroup(sb, "h"+l.owner+"-"+strconv.FormatInt(execSeq.Add(1), 10))
	l.cgmu.Unlock()
	if err != nil {
		g.kill()
		return nil, err
	}
	r := &running{start: time.Now(), netDone: func() {}, isolated: true}
	if len(g.dirs) > 0 {
		r.group = g
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		g.kill()
		return nil, err
	}
	defer outR.Close()
	err = l.startBwrap(sb, p, r, n, outW, nil)
	outW.Close()
	if err != nil {
		g.kill()
		return nil, err
	}
	h := &holder{key: key, root: root, r: r, done: make(chan struct{})}
	go func() { // it ends killed with the sandbox's groups, or by a step
		<-r.waitc
		close(h.done)
		l.endHolder(sb.Name, h)
	}()
	ready := make(chan error, 1)
	go func() {
		_, err := bufio.NewReader(outR).ReadString('\n')
		ready <- err
	}()
	select {
	case err = <-ready:
	case <-h.done:
		err = errors.New("ended")
	case <-time.After(holderReady):
		err = errors.New("not ready in time")
	}
	if err == nil {
		h.ns, err = openNamespaces(r.cmd.Process.Pid)
	}
	if err != nil {
		l.endHolder(sb.Name, h)
		return nil, fmt.Errorf("holder: %w", err)
	}
	return h, nil
}

// openNamespaces opens the namespaces of the innermost process under pid
// (bwrap's: its PID namespace's init, then the holder's command).
func openNamespaces(pid int) ([]*os.File, error) {
	leaf := pid
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", leaf, leaf))
		if err != nil {
			return nil, err
		}
		kids := strings.Fields(string(b))
		if len(kids) == 0 {
			break
		}
		if leaf, err = strconv.Atoi(kids[0]); err != nil {
			return nil, err
		}
	}
	if leaf == pid {
		return nil, errors.New("bwrap has no child")
	}
	var files []*os.File
	for _, ns := range holderNamespaces {
		f, err := os.Open(filepath.Join("/proc", strconv.Itoa(leaf), "ns", ns[1]))
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}

// endHolder ends h and, when it is the sandbox's, forgets it. Safe to call
// more than once.
func (l *Local) endHolder(name string, h *holder) {
	l.hmu.Lock()
	if l.holders[name] == h {
		delete(l.holders, name)
	}
	l.hmu.Unlock()
	h.mu.Lock()
	if h.ended {
		h.mu.Unlock()
		return
	}
	h.ended = true
	h.closeIfDone()
	h.mu.Unlock()
	if h.r.group != nil {
		h.r.group.kill()
	}
	_ = syscall.Kill(-h.r.cmd.Process.Pid, syscall.SIGKILL)
}

// dropHolder ends the sandbox's holder, if any.
func (l *Local) dropHolder(name string) {
	l.hmu.Lock()
	h := l.holders[name]
	l.hmu.Unlock()
	if h != nil {
		l.endHolder(name, h)
	}
}

// holdBinary is the holder's sleep: a copy of the host's, executable and
// not readable by anyone but root (0111), in the data directory; bound
// read-only into the holder's mount namespace at its host path.
func (l *Local) holdBinary() (string, error) {
	path := filepath.Join(l.root, "holder-sleep")
	if st, err := os.Stat(path); err == nil && st.Mode().IsRegular() && st.Mode().Perm() == 0o111 {
		return path, nil
	}
	src, err := exec.LookPath("sleep")
	if err != nil {
		return "", err
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return "", err
	}
	f, err := os.CreateTemp(l.root, "holder-sleep.*.tmp")
	if err != nil {
		return "", err
	}
	defer os.Remove(f.Name())
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o111)
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	return path, err
}
