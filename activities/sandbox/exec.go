package sandbox

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// OutputEnv is the variable that names a step's output file. Under
// isolation the driver gives the command a path in its own /tmp instead
// (for every variable of outputEnvs) and moves what it wrote to the host
// path asked for once it has ended.
const OutputEnv = "SVC_OUTPUT"

// outputEnvs name files a command writes for the caller.
var outputEnvs = map[string]bool{OutputEnv: true}

// maxOutputCopy bounds what is copied back of a step's output file (the
// caller enforces its own, smaller cap on the copy).
const maxOutputCopy = 1 << 20

// execPlan is a command ready to start.
type execPlan struct {
	argv      []string // as the command sees it (a single string is run by sh -c)
	path      string   // the executable on the host, for the not-found check
	dir       string   // the working directory on the host
	insideDir string   // the working directory as the command sees it
	env       []string
	ownEnv    int // env[:ownEnv] are factoryd's own variables, the rest the sandbox's and the step's
	offline   bool
	services  int         // how many worker Services it reaches
	outputs   [][2]string // output files: where they go on the host, where the command wrote them
	binds     [][2]string // host directory, where the command sees it
	readOnly  []string    // host files seen read-only at their path
	sockets   [][2]string // service sockets: host path, where the command sees them
	uid       int         // the user inside the sandbox
	passwd    []byte
	asPid1    bool // the command is its PID namespace's init (a holder's)
	group     []byte
}

// execSeq numbers commands for their cgroup names.
var execSeq atomic.Int64

// Exec runs a command in a sandbox and waits for it and everything it
// started: the rest of its cgroup (and, isolated, its PID namespace) is
// killed when it ends.
func (l *Local) Exec(ctx context.Context, req ExecRequest) (ExecResult, error) {
	sb, err := l.execSandbox(ctx, req.Sandbox)
	if err != nil {
		return ExecResult{}, err
	}
	p, err := l.plan(sb, req)
	if err != nil {
		return ExecResult{}, err
	}
	p.services = len(req.Services)
	stopServices, err := l.serveServices(sb, p, req.Services)
	if err != nil {
		return ExecResult{}, err
	}
	defer stopServices()
	r, err := l.start(sb, p, req.NextSoon)
	if err != nil {
		return ExecResult{}, err
	}
	defer l.release(sb, r)
	r.copyOutput(req.Stdout, req.Stderr)
	res, err := r.wait(ctx, req.Timeout)
	if err != nil {
		return res, err
	}
	for _, o := range p.outputs {
		if err := copyOutput(o[1], o[0]); err != nil {
			return res, errorf(CodeFileOperation, err, "collect the output file %s", o[0])
		}
	}
	l.touch(sb.Name)
	if ctx.Err() != nil && res.Signaled {
		return res, ctx.Err()
	}
	return res, nil
}

// execSandbox loads the sandbox a command runs in, resuming it when it is
// paused with auto_resume = on_activity.
func (l *Local) execSandbox(ctx context.Context, name string) (Sandbox, error) {
	sb, err := l.load(name)
	if err != nil || sb.State != StatePaused {
		return sb, err
	}
	if sb.Lifecycle == nil || sb.Lifecycle.AutoResume != "on_activity" {
		return Sandbox{}, errorf(CodeInvalidState, nil, "sandbox %q is paused (resume it, or set lifecycle.auto_resume = \"on_activity\")", sb.Name)
	}
	if err := l.Resume(ctx, sb.Name); err != nil {
		return Sandbox{}, err
	}
	return l.load(name)
}

// plan resolves the command, its working directory and its environment.
func (l *Local) plan(sb Sandbox, req ExecRequest) (*execPlan, error) {
	if len(req.Argv) == 0 || req.Argv[0] == "" {
		return nil, errorf(CodeCommandNotFound, nil, "empty command")
	}
	dir, err := within(sb.Root, req.Workdir)
	if err != nil {
		return nil, err
	}
	if err := mkdirOwned(sb.Root, dir, sb.HostUID); err != nil {
		return nil, errorf(CodeFileOperation, err, "workdir %q", req.Workdir)
	}
	p := &execPlan{argv: append([]string(nil), req.Argv...), dir: dir, readOnly: req.ReadOnly, offline: !sb.InternetEnabled && !req.Network}
	if len(p.argv) == 1 {
		p.argv = []string{"/bin/sh", "-c", p.argv[0]}
	}
	pathList := l.stepPath()
	if p.path, err = lookPath(p.argv[0], dir, pathList); err != nil {
		return nil, errorf(CodeCommandNotFound, err, "command %q not found", p.argv[0])
	}
	home := sb.Root
	p.insideDir = dir
	if l.isolated() {
		if err := l.ensureTmp(sb); err != nil {
			return nil, errorf(CodeFileOperation, err, "sandbox %q: /tmp", sb.Name)
		}
		rel, _ := filepath.Rel(sb.Root, dir)
		home, p.insideDir = insideRoot, filepath.Join(insideRoot, rel)
	}
	p.env = []string{"PATH=" + pathList, "HOME=" + home, "LANG=C.UTF-8", "SANDBOX_NAME=" + sb.Name, "TMPDIR=/tmp",
		markerEnv + "=" + l.marker(sb.Name)}
	p.ownEnv = len(p.env)
	if l.isolated() {
		p.binds = append([][2]string{{sb.Root, insideRoot}}, sortedBinds(req.Binds)...)
		for i := range p.argv {
			p.argv[i] = p.inside(p.argv[i])
		}
	}
	for _, m := range []map[string]string{sb.Env, req.Env} {
		for k, v := range m {
			if outputEnvs[k] && l.isolated() && filepath.IsAbs(v) && v != os.DevNull && p.inside(v) == v {
				local := filepath.Join(l.tmpDir(sb.Name), filepath.Base(v))
				_ = os.Remove(local)
				p.outputs = append(p.outputs, [2]string{v, local})
				v = "/tmp/" + filepath.Base(v)
			}
			if l.isolated() {
				v = p.inside(v)
			}
			p.env = append(p.env, k+"="+v)
		}
	}
	if l.isolated() {
		p.uid, p.passwd, p.group = stepUser(req.User, home)
	}
	return p, nil
}

// stepPath is the PATH steps get: factoryd's, limited under isolation to
// the directories the sandbox sees.
func (l *Local) stepPath() string {
	host := os.Getenv("PATH")
	if !l.isolated() {
		return host
	}
	var keep []string
	for _, d := range filepath.SplitList(host) {
		for _, top := range []string{"/usr/", "/opt/", "/bin", "/sbin"} {
			if strings.HasPrefix(d+"/", top) || d == top {
				keep = append(keep, d)
				break
			}
		}
	}
	if len(keep) == 0 {
		return "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"
	}
	return strings.Join(keep, ":")
}

// lookPath finds a command as the sandbox would: names in pathList,
// relative paths in the working directory.
func lookPath(name, dir, pathList string) (string, error) {
	if strings.Contains(name, "/") {
		if !filepath.IsAbs(name) {
			name = filepath.Join(dir, name)
		}
		_, err := os.Stat(name)
		return name, err
	}
	for _, d := range filepath.SplitList(pathList) {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", exec.ErrNotFound
}

// running is a started command.
type running struct {
	cmd     *exec.Cmd
	group   *execGroup // nil when the host has no cgroups
	waitc   <-chan error
	outR    *os.File
	errR    *os.File
	copied  chan struct{}
	netDone func() // releases its network namespace
	start   time.Time
	// emptied: its command ended and left nothing in its group, which
	// another command of the sandbox may use (cgpool.go)
	emptied bool
	// nextSoon: another command of the sandbox follows soon
	// (ExecRequest.NextSoon); its launcher joins the group while this one
	// runs (startOn) or, when it could not, after it (release).
	nextSoon bool
	// isolated: started by bwrap, whose PID namespace ends just after it
	// (killRest waits for that before it tells the group is not empty).
	isolated bool
	// ln is the launcher that started the command when its thread may
	// start another (keepsLauncher): the group keeps it for the next
	// command (release), else it is retired.
	ln *launcher
	// entered: started by nsenter in holder's namespaces (holder.go),
	// whose descriptors it holds until it ends.
	entered bool
	holder  *holder
}

// start starts the command in its cgroup and copies its output.
func (l *Local) start(sb Sandbox, p *execPlan, nextSoon bool) (*running, error) {
	r := &running{start: time.Now(), netDone: func() {}, nextSoon: nextSoon}
	n, netDone, err := l.joinNet(sb, p, p.services)
	if err != nil {
		return nil, errorf(CodeProvisioningFailed, err, "give the sandbox its network")
	}
	r.netDone = netDone
	l.cgmu.Lock()
	g, err := l.takeGroup(sb)
	if err != nil {
		g.kill()
		l.putGroup(sb, nil)
	}
	l.cgmu.Unlock()
	if err != nil {
		netDone()
		return nil, errorf(CodeExecFailed, err, "apply the sandbox's limits to %q", p.argv[0])
	}
	if g.hasLauncher() && (!launchersOn() || !g.lns[0].usable()) {
		g.retireLaunchers() // a join failed (or launchers are off): the command joins when it starts
	}
	if len(g.dirs) > 0 {
		r.group = g
	}
	if err := l.startIn(sb, p, r, n); err != nil {
		l.cgmu.Lock()
		g.kill()
		l.putGroup(sb, nil)
		l.cgmu.Unlock()
		netDone()
		return nil, err
	}
	l.track(sb.Name, r.cmd.Process.Pid, true)
	return r, nil
}

// startIn starts the command in the network namespace n (nil: the host's)
// with its output piped to r.
func (l *Local) startIn(sb Sandbox, p *execPlan, r *running, n *sandboxNet) error {
	outR, outW, err := os.Pipe()
	if err != nil {
		return errorf(CodeExecFailed, err, "pipe")
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return errorf(CodeExecFailed, err, "pipe")
	}
	r.outR, r.errR = outR, errR
	r.isolated = l.isolated()
	if l.isolated() {
		err = l.startIsolated(sb, p, r, n, outW, errW)
	} else {
		err = startHost(p, r, n, outW, errW)
	}
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
	}
	return err
}

// startHost starts a command on the host (isolation none): its own process
// group, the sandbox's network namespace when offline, its cgroup joined by
// a shim.
func startHost(p *execPlan, r *running, n *sandboxNet, stdout, stderr *os.File) error {
	argv := p.argv
	if r.group.needsShim() {
		argv = shim(r.group.procsFiles(), argv)
	}
	path, _ := exec.LookPath(argv[0])
	if argv[0] == p.argv[0] {
		path = p.path
	}
	// Pdeathsig kills the command when the worker dies (see startOnThread
	// for why the forking thread is pinned).
	cmd := &exec.Cmd{Path: path, Args: argv, Dir: p.dir, Env: p.env, Stdout: stdout, Stderr: stderr,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}}
	return startIn(cmd, n, r, p.argv[0], nil)
}

// startIn starts cmd in r's group (on cgroup v2 cloned straight into it,
// useCgroupFD) and in n, as startOn does, and makes it r's command.
func startIn(cmd *exec.Cmd, n *sandboxNet, r *running, name string, before func() error) error {
	closeFD, err := useCgroupFD(cmd, r.group)
	if err != nil {
		return errorf(CodeExecFailed, err, "open the command's cgroup")
	}
	defer closeFD()
	r.cmd = cmd
	return startOn(cmd, n, r, name, before)
}

// startOn starts cmd in n (nil: the host's network) from a thread of its
// own (startOnThread, which runs before first) and lets r wait for it.
func startOn(cmd *exec.Cmd, n *sandboxNet, r *running, name string, before func() error) error {
	var ns *os.File
	if n != nil {
		ns = n.ns
	}
	var ln *launcher
	if r.group != nil {
		ln = r.group.takeLauncher() // in the group already: nothing to join
	}
	if ln != nil && ln.netns && ns == nil {
		// A kept launcher in a network namespace: this command runs on the
		// host's network, so it joins its groups when it starts instead.
		ln.retire()
		ln = nil
	}
	keep := ln != nil && keepsLauncher(before, nil)
	if ln != nil && r.nextSoon && !keep {
		// The launchers of the commands that follow join now, while this
		// one runs (launchersAhead; joined when it ended, one held a job's
		// second step 10 ms in half the runs). A launcher the group keeps
		// (release) is there for the next command without a join.
		r.group.addLaunchers(launchersAhead)
	}
	var atStart func(int) error
	if ln == nil && traceJoin(r.group) {
		cmd.SysProcAttr.Ptrace = true
		files := r.group.procsFiles()
		atStart = func(pid int) error { return joinAtExec(pid, files) }
	}
	wait, err := startOnLauncher(ln, cmd, ns, before, atStart, r.entered)
	if err != nil {
		return errorf(CodeExecFailed, err, "start %q", name) // ln's thread ended with the job
	}
	r.waitc = wait()
	if keep {
		r.ln = ln
	}
	return nil
}

// shimScript writes the shell's own pid into each cgroup.procs file named
// (their count first), then execs the command: it joins its cgroups before
// the command runs (cgroup v1, where a process cannot be cloned into one),
// when the command cannot be started traced (tracejoin.go).
const shimScript = `n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ >"$1" || exit 125; shift; n=$((n-1)); done; exec "$@"`

func shim(files, argv []string) []string {
	out := []string{"/bin/sh", "-c", shimScript, "linefactory-shim", strconv.Itoa(len(files))}
	out = append(out, files...)
	return append(out, argv...)
}

// useCgroupFD makes cmd start inside the group (cgroup v2).
func useCgroupFD(cmd *exec.Cmd, g *execGroup) (func(), error) {
	if g == nil || !g.v2 {
		return func() {}, nil
	}
	f, err := os.Open(g.dirs[0])
	if err != nil {
		return nil, err
	}
	cmd.SysProcAttr.UseCgroupFD = true
	cmd.SysProcAttr.CgroupFD = int(f.Fd())
	return func() { f.Close() }, nil
}

// wait waits for the command, stopping it on ctx's end or the timeout, and
// kills what it left behind.
func (r *running) wait(ctx context.Context, timeout time.Duration) (ExecResult, error) {
	var tick <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		tick = t.C
	}
	res := ExecResult{}
	var waitErr error
	select {
	case waitErr = <-r.waitc:
	case <-ctx.Done():
		waitErr = r.stop()
		res.Signaled = true
	case <-tick:
		waitErr = r.stop()
		res.TimedOut = true
	}
	if r.holder != nil { // reaped: its nsenter opened what it entered long ago
		r.holder.release()
		r.holder = nil
	}
	r.killRest()
	res.Duration = time.Since(r.start)
	var ee *exec.ExitError
	switch {
	case waitErr == nil:
	case errors.As(waitErr, &ee):
		res.ExitCode = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			res.Signaled = true
			res.ExitCode = 128 + int(ws.Signal())
		}
	default:
		return res, errorf(CodeExecFailed, waitErr, "wait for %q", r.cmd.Args[0])
	}
	return res, nil
}

// signal sends sig to every process of the command.
func (r *running) signal(sig syscall.Signal) {
	if r.group != nil {
		for _, d := range r.group.dirs {
			for _, pid := range groupPids(d) {
				_ = syscall.Kill(pid, sig)
			}
		}
	}
	_ = syscall.Kill(-r.cmd.Process.Pid, sig)
}

// stop asks the command to end (SIGTERM), then kills it after killGrace.
func (r *running) stop() error {
	r.signal(syscall.SIGCONT) // a stopped process cannot act on SIGTERM
	r.signal(syscall.SIGTERM)
	select {
	case err := <-r.waitc:
		return err
	case <-time.After(killGrace):
		r.killRest()
		return <-r.waitc
	}
}

// killRest kills whatever the command left (its cgroup, its process group;
// isolated, the PID namespace dies with bwrap) and stops reading its
// output after pipeGrace.
func (r *running) killRest() {
	if r.group != nil {
		empty := r.group.empty
		if r.isolated {
			empty = r.group.emptySoon
		}
		if r.emptied = empty(); !r.emptied {
			if r.ln != nil {
				// Its thread is in the group, which cannot be removed while
				// it is: it ends as soon as its command is reaped (it may
				// not be yet: a stop's kill), not kept.
				r.ln.end()
			}
			r.group.kill()
		}
	}
	_ = syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL)
	if r.copied == nil {
		return
	}
	select {
	case <-r.copied:
	case <-time.After(pipeGrace):
		r.outR.Close()
		r.errR.Close()
		<-r.copied
	}
}

// copyOutput starts copying the command's output to the request's writers.
func (r *running) copyOutput(stdout, stderr io.Writer) {
	var (
		copies sync.WaitGroup
		wmu    sync.Mutex // stdout and stderr may share a writer
	)
	copyTo := func(w io.Writer, f *os.File) {
		defer copies.Done()
		defer f.Close()
		if w == nil {
			w = io.Discard
		}
		_, _ = io.Copy(lockedWriter{&wmu, w}, f)
	}
	copies.Add(2)
	go copyTo(stdout, r.outR)
	go copyTo(stderr, r.errR)
	done := make(chan struct{})
	go func() { copies.Wait(); close(done) }()
	r.copied = done
}

// release forgets a finished command and keeps its emptied cgroups for the
// sandbox's next command, or removes them (cgpool.go).
func (l *Local) release(sb Sandbox, r *running) {
	r.netDone()
	l.track(sb.Name, r.cmd.Process.Pid, false)
	if r.ln != nil && (r.group == nil || !r.emptied || !r.nextSoon) {
		// Not kept: its command left something behind, or none follows
		// soon (the sandbox's groups may go, and a thread in them with).
		r.ln.retire()
		r.ln = nil
	}
	l.cgmu.Lock()
	defer l.cgmu.Unlock()
	if r.group != nil && !r.emptied {
		r.group.kill()
	}
	if r.ln != nil {
		// In the group already: the next command's launcher, no join.
		r.group.lns = append([]*launcher{r.ln}, r.group.lns...)
		r.ln = nil
	}
	if r.group != nil && r.emptied {
		if r.nextSoon && !r.group.hasLauncher() && launchersOn() {
			// Joins while the next command is on its way (this one started
			// without a launcher); not after a sandbox's last command, whose
			// groups go when it is deleted (a join holds the kernel's cgroup
			// mutex, and the removal with it).
			r.group.addLaunchers(1)
		}
		l.putGroup(sb, r.group)
	} else {
		l.putGroup(sb, nil)
	}
}

// copyOutput moves the output file a command wrote in its /tmp to the host
// path the caller reads: only a regular file's content, never through a
// symlink.
func copyOutput(local, host string) error {
	defer os.Remove(local)
	in, err := os.OpenFile(local, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	var st os.FileInfo
	if err == nil {
		defer in.Close()
		st, err = in.Stat()
	}
	if err != nil || !st.Mode().IsRegular() {
		// a FIFO, a symlink...: the caller sees the same kind of thing
		// (never its target) and reports it as its own contract error
		return syscall.Mkfifo(host, 0o600)
	}
	out, err := os.OpenFile(host, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, io.LimitReader(in, maxOutputCopy))
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// sortedBinds lists binds longest host path first (the most specific
// rewrite wins).
func sortedBinds(m map[string]string) [][2]string {
	out := make([][2]string, 0, len(m))
	for h, in := range m {
		out = append(out, [2]string{filepath.Clean(h), in})
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i][0]) > len(out[j][0]) })
	return out
}

// inside rewrites host paths under a bound directory (anywhere in s) to
// where the command sees them.
func (p *execPlan) inside(s string) string {
	for _, b := range p.binds {
		s = strings.ReplaceAll(s, b[0], b[1])
	}
	return s
}
