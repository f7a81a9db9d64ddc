package sandbox

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	goruntime "runtime"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// killGrace is how long a process group has between SIGTERM and SIGKILL.
const killGrace = 2 * time.Second

// pipeGrace is how long Exec reads a command's output after its process
// group is gone, before it stops reading (a process that left the group may
// hold the pipes forever).
const pipeGrace = time.Second

// Local is the local driver: a sandbox is <root>/sandboxes/<name>/workspace
// with a state file beside it; snapshots are <root>/snapshots/<name>.tar.gz.
type Local struct {
	root string
	// Now is the clock.
	Now func() time.Time

	groupPrefix string // short hash of root, for cgroup names

	mu       sync.Mutex
	groups   map[string]map[int]bool // sandbox name → running process groups
	building map[string]bool         // sandboxes being provisioned now
	owner    string                  // marks step processes as this process's

	// Snapshots is the shared snapshot storage; nil keeps archives in
	// <root>/snapshots (one worker).
	Snapshots *Snapshots
}

// NewLocal returns a local driver rooted at dir.
func NewLocal(dir string) (*Local, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	for _, d := range []string{"sandboxes", "snapshots"} {
		if err := os.MkdirAll(filepath.Join(abs, d), 0o755); err != nil {
			return nil, fmt.Errorf("sandbox root: %w", err)
		}
	}
	sum := sha256.Sum256([]byte(abs))
	return &Local{root: abs, Now: time.Now, groups: map[string]map[int]bool{}, building: map[string]bool{},
		groupPrefix: hex.EncodeToString(sum[:4]), owner: processID(os.Getpid())}, nil
}

func (l *Local) dir(name string) string       { return filepath.Join(l.root, "sandboxes", name) }
func (l *Local) statePath(name string) string { return filepath.Join(l.dir(name), "state.json") }
func (l *Local) snapshotPath(name string) string {
	return filepath.Join(l.root, "snapshots", name+".tar.gz")
}

func (l *Local) load(name string) (Sandbox, error) {
	if !nameRE.MatchString(name) {
		return Sandbox{}, errorf(CodeNotFound, nil, "invalid sandbox name %q", name)
	}
	data, err := os.ReadFile(l.statePath(name))
	if errors.Is(err, fs.ErrNotExist) {
		return Sandbox{}, errorf(CodeNotFound, nil, "sandbox %q does not exist", name)
	}
	if err != nil {
		return Sandbox{}, errorf(CodeFileOperation, err, "read sandbox %q", name)
	}
	var sb Sandbox
	if err := json.Unmarshal(data, &sb); err != nil {
		return Sandbox{}, errorf(CodeFileOperation, err, "sandbox %q state", name)
	}
	return sb, nil
}

func (l *Local) save(sb Sandbox) error {
	data, err := json.MarshalIndent(sb, "", "  ")
	if err != nil {
		return err
	}
	tmp := l.statePath(sb.Name) + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return errorf(CodeFileOperation, err, "save sandbox %q", sb.Name)
	}
	return os.Rename(tmp, l.statePath(sb.Name))
}

// Get returns a sandbox by name.
func (l *Local) Get(_ context.Context, name string) (Sandbox, error) { return l.load(name) }

// Acquire provisions, ensures or reuses a sandbox per spec.Mode. Sources
// and setup scripts run with ctx: cancelling it kills them and removes the
// half-built sandbox.
func (l *Local) Acquire(ctx context.Context, spec Spec) (Sandbox, error) {
	mode := spec.Mode
	if mode == "" {
		mode = "provision"
	}
	name := spec.Name
	if name == "" {
		if mode != "provision" {
			return Sandbox{}, errorf(CodeProvisioningFailed, nil, "mode %s needs a sandbox name", mode)
		}
		var b [6]byte
		_, _ = rand.Read(b[:])
		name = "sbx-" + hex.EncodeToString(b[:])
	}
	if !nameRE.MatchString(name) {
		return Sandbox{}, errorf(CodeProvisioningFailed, nil, "invalid sandbox name %q", name)
	}
	// Another task of this worker may be provisioning the same name right
	// now (ensure in fanout tasks, or an earlier attempt still cleaning up):
	// wait for it rather than see a half-built sandbox.
	if err := l.waitBuilt(ctx, name); err != nil {
		return Sandbox{}, err
	}
	existing, err := l.load(name)
	exists := err == nil
	if err != nil && CodeOf(err) != CodeNotFound {
		return Sandbox{}, err
	}
	halfBuilt := exists && existing.State == StateProvisioning
	switch mode {
	case "provision":
		if exists {
			if spec.Key == "" || existing.ProvisionKey != spec.Key {
				return Sandbox{}, errorf(CodeAlreadyExists, nil, "sandbox %q already exists", name)
			}
			if !halfBuilt { // a retried attempt: the sandbox is ours
				existing.Created = true
				return existing, nil
			}
		}
	case "reuse":
		if !exists {
			return Sandbox{}, errorf(CodeNotFound, nil, "sandbox %q does not exist (mode reuse)", name)
		}
		if halfBuilt {
			return Sandbox{}, errorf(CodeInvalidState, nil, "sandbox %q was never fully provisioned (its setup did not complete)", name)
		}
		return existing, nil
	case "ensure":
		if exists && !halfBuilt {
			return existing, nil
		}
	default:
		return Sandbox{}, errorf(CodeProvisioningFailed, nil, "unknown sandbox mode %q", mode)
	}
	if halfBuilt {
		if err := l.Delete(ctx, name); err != nil {
			return Sandbox{}, errorf(CodeProvisioningFailed, err, "remove half-built sandbox %q", name)
		}
	}
	return l.create(ctx, name, spec)
}

// waitBuilt waits until no provisioning of name is under way in this process.
func (l *Local) waitBuilt(ctx context.Context, name string) error {
	for {
		l.mu.Lock()
		busy := l.building[name]
		l.mu.Unlock()
		if !busy {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (l *Local) setBuilding(name string, on bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if on {
		if l.building[name] {
			return false
		}
		l.building[name] = true
		return true
	}
	delete(l.building, name)
	return true
}

func (l *Local) create(ctx context.Context, name string, spec Spec) (Sandbox, error) {
	if !l.setBuilding(name, true) {
		return Sandbox{}, fmt.Errorf("sandbox %q is being provisioned by another attempt", name) // retryable
	}
	defer l.setBuilding(name, false)
	now := l.Now().UTC()
	sb := Sandbox{Name: name, Root: filepath.Join(l.dir(name), "workspace"), State: StateProvisioning, Image: spec.Image,
		Vcpus: spec.Vcpus, MemoryMB: spec.MemoryMB, InternetEnabled: spec.InternetEnabled, Env: spec.Env,
		Lifecycle: spec.Lifecycle, CreatedAt: now, LastActiveAt: now, Created: true, ProvisionKey: spec.Key,
		LimitsApplied: map[string]string{
			"disk_gb": "recorded, not enforced by the local driver",
			"image":   "recorded: the local driver runs on the host's root filesystem",
		},
	}
	fail := func(err error) (Sandbox, error) {
		l.signalAll(name, syscall.SIGKILL)
		removeCgroups(sb)
		_ = os.RemoveAll(l.dir(name))
		if ctx.Err() != nil {
			return Sandbox{}, ctx.Err()
		}
		if CodeOf(err) == "" {
			err = errorf(CodeProvisioningFailed, err, "provision sandbox %q", name)
		}
		return Sandbox{}, err
	}
	if err := os.MkdirAll(sb.Root, 0o755); err != nil {
		return fail(err)
	}
	sb.CgroupName = l.groupPrefix + "-" + name
	setupCgroups(&sb)
	if !spec.InternetEnabled {
		if err := checkNetns(); err != nil {
			return fail(errorf(CodeProvisioningFailed, err, "internet_enabled = false needs a network namespace, which this host cannot create"))
		}
		sb.LimitsApplied["internet_enabled"] = "enforced for steps: they run in a new network namespace (loopback only); sources and setup scripts have the network"
	}
	if err := l.save(sb); err != nil {
		return fail(err)
	}
	if spec.SnapshotName != "" {
		archive, done, err := l.snapshotArchive(ctx, spec.SnapshotName)
		if err == nil {
			err = extract(archive, sb.Root)
			done()
		}
		if err != nil {
			return fail(errorf(CodeProvisioningFailed, err, "restore snapshot %q", spec.SnapshotName))
		}
	}
	for i, src := range spec.Sources {
		args := []string{"clone", "--quiet"}
		if src.Branch != "" {
			args = append(args, "--branch", src.Branch)
		}
		target := src.TargetPath
		if target == "" {
			target = strings.TrimSuffix(filepath.Base(src.RepoURL), ".git")
		}
		dest, err := within(sb.Root, target)
		if err != nil {
			return fail(err)
		}
		var out bytes.Buffer
		res, err := l.Exec(ctx, ExecRequest{Sandbox: name, Argv: append([]string{"git"}, append(args, "--", src.RepoURL, dest)...),
			Stdout: &out, Stderr: &out, Network: true})
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("exit %d: %s", res.ExitCode, tail(out.String()))
		}
		if err != nil {
			return fail(errorf(CodeProvisioningFailed, err, "clone sources[%d] %s", i, src.RepoURL))
		}
	}
	for i, sc := range spec.SetupScripts {
		var out bytes.Buffer
		res, err := l.Exec(ctx, ExecRequest{Sandbox: name, Argv: []string{sc.Script}, Stdout: &out, Stderr: &out, Network: true})
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("exit %d: %s", res.ExitCode, tail(out.String()))
		}
		if err != nil {
			label := sc.Name
			if label == "" {
				label = fmt.Sprintf("setup_scripts[%d]", i)
			}
			return fail(errorf(CodeProvisioningFailed, err, "setup script %s failed", label))
		}
	}
	cur, err := l.load(name)
	if err != nil {
		return fail(err)
	}
	cur.State = StateRunning
	if err := l.save(cur); err != nil {
		return fail(err)
	}
	cur.Created = true
	return cur, nil
}

func tail(s string) string {
	if len(s) > 2000 {
		return "…" + s[len(s)-2000:]
	}
	return s
}

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

// within resolves rel inside root and rejects paths that leave it, also
// through symlinks.
func within(root, rel string) (string, error) {
	if filepath.IsAbs(rel) {
		return "", errorf(CodeFileOperation, nil, "path %q must be relative to the sandbox workspace", rel)
	}
	p := filepath.Join(root, rel)
	if p != root && !strings.HasPrefix(p, root+string(filepath.Separator)) {
		return "", errorf(CodeFileOperation, nil, "path %q escapes the sandbox workspace", rel)
	}
	if real, err := filepath.EvalSymlinks(p); err == nil {
		realRoot, _ := filepath.EvalSymlinks(root)
		if real != realRoot && !strings.HasPrefix(real, realRoot+string(filepath.Separator)) {
			return "", errorf(CodeFileOperation, nil, "path %q escapes the sandbox workspace through a symlink", rel)
		}
	}
	return p, nil
}

func (l *Local) track(name string, pgid int, add bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if add {
		if l.groups[name] == nil {
			l.groups[name] = map[int]bool{}
		}
		l.groups[name][pgid] = true
		return
	}
	delete(l.groups[name], pgid)
}

func (l *Local) signalAll(name string, sig syscall.Signal) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for pgid := range l.groups[name] {
		_ = syscall.Kill(-pgid, sig)
	}
}

// Exec runs a command in a sandbox and waits for its whole process group.
func (l *Local) Exec(ctx context.Context, req ExecRequest) (ExecResult, error) {
	sb, err := l.load(req.Sandbox)
	if err != nil {
		return ExecResult{}, err
	}
	if sb.State == StatePaused {
		if sb.Lifecycle == nil || sb.Lifecycle.AutoResume != "on_activity" {
			return ExecResult{}, errorf(CodeInvalidState, nil, "sandbox %q is paused (resume it, or set lifecycle.auto_resume = \"on_activity\")", sb.Name)
		}
		if err := l.Resume(ctx, sb.Name); err != nil {
			return ExecResult{}, err
		}
	}
	if len(req.Argv) == 0 || req.Argv[0] == "" {
		return ExecResult{}, errorf(CodeCommandNotFound, nil, "empty command")
	}
	dir, err := within(sb.Root, req.Workdir)
	if err != nil {
		return ExecResult{}, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return ExecResult{}, errorf(CodeFileOperation, err, "workdir %q", req.Workdir)
	}
	argv := req.Argv
	if len(argv) == 1 {
		argv = []string{"/bin/sh", "-c", argv[0]}
	}
	path := argv[0]
	if !strings.Contains(path, "/") {
		if path, err = exec.LookPath(path); err != nil {
			return ExecResult{}, errorf(CodeCommandNotFound, err, "command %q not found", argv[0])
		}
	} else if !filepath.IsAbs(path) {
		path = filepath.Join(dir, path)
	}
	if _, err := os.Stat(path); err != nil {
		return ExecResult{}, errorf(CodeCommandNotFound, err, "command %q not found", argv[0])
	}
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + sb.Root, "LANG=C.UTF-8", "SANDBOX_NAME=" + sb.Name, "TMPDIR=/tmp",
		markerEnv + "=" + l.marker(sb.Name)}
	for _, m := range []map[string]string{sb.Env, req.Env} {
		for k, v := range m {
			env = append(env, k+"="+v)
		}
	}

	// Our own pipes: Wait returns when the process exits even if children
	// still hold the pipes; we then kill the rest of the group.
	outR, outW, err := os.Pipe()
	if err != nil {
		return ExecResult{}, errorf(CodeExecFailed, err, "pipe")
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return ExecResult{}, errorf(CodeExecFailed, err, "pipe")
	}
	// Pdeathsig kills the step when the worker dies. The kernel sends it when
	// the *thread* that forked the child exits; Go only ends a thread when a
	// goroutine exits while locked to it, and we hold the lock (so the same
	// thread is used) only around Start, so in practice this is the
	// process's death (an offline step's thread, which startOffline keeps
	// locked, exits only once the step has ended). The rest of the group is
	// found by KillLeftovers.
	cmd := &exec.Cmd{Path: path, Args: argv, Dir: dir, Env: env, Stdout: outW, Stderr: errW,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}}
	netns := !sb.InternetEnabled && !req.Network
	start := time.Now()
	var wait func() <-chan error // reaps the command: only once it joined its cgroups
	if netns {
		wait, err = startOffline(cmd)
	} else {
		goruntime.LockOSThread()
		err = cmd.Start()
		goruntime.UnlockOSThread()
		wait = func() <-chan error {
			waitc := make(chan error, 1)
			go func() { waitc <- cmd.Wait() }()
			return waitc
		}
	}
	if err != nil {
		outR.Close()
		outW.Close()
		errR.Close()
		errW.Close()
		if netns {
			return ExecResult{}, errorf(CodeProvisioningFailed, err, "start %q in a network namespace", argv[0])
		}
		return ExecResult{}, errorf(CodeExecFailed, err, "start %q", argv[0])
	}
	outW.Close()
	errW.Close()
	pgid := cmd.Process.Pid
	if err := joinCgroups(sb, pgid); err != nil {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-wait()
		return ExecResult{}, errorf(CodeExecFailed, err, "apply the sandbox's limits to %q", argv[0])
	}
	l.track(sb.Name, pgid, true)
	defer l.track(sb.Name, pgid, false)

	var (
		copies sync.WaitGroup
		wmu    sync.Mutex // stdout and stderr may share a writer
	)
	copyTo := func(w io.Writer, r *os.File) {
		defer copies.Done()
		defer r.Close()
		if w == nil {
			w = io.Discard
		}
		_, _ = io.Copy(lockedWriter{&wmu, w}, r)
	}
	copies.Add(2)
	go copyTo(req.Stdout, outR)
	go copyTo(req.Stderr, errR)

	waitc := wait()
	var timeout <-chan time.Time
	if req.Timeout > 0 {
		t := time.NewTimer(req.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	res := ExecResult{}
	var waitErr error
	select {
	case waitErr = <-waitc:
	case <-ctx.Done():
		waitErr = killGroup(pgid, waitc)
		res.Signaled = true
	case <-timeout:
		waitErr = killGroup(pgid, waitc)
		res.TimedOut = true
	}
	// Whatever the main process left behind in its group goes too.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	// A process that left the group (setsid) may still hold the pipes: give
	// the copies a moment to drain, then close our read ends.
	copied := make(chan struct{})
	go func() { copies.Wait(); close(copied) }()
	select {
	case <-copied:
	case <-time.After(pipeGrace):
		outR.Close()
		errR.Close()
		<-copied
	}
	res.Duration = time.Since(start)
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
		return res, errorf(CodeExecFailed, waitErr, "wait for %q", argv[0])
	}
	sb.LastActiveAt = l.Now().UTC()
	if cur, err := l.load(sb.Name); err == nil {
		cur.LastActiveAt = sb.LastActiveAt
		_ = l.save(cur)
	}
	if ctx.Err() != nil && res.Signaled {
		return res, ctx.Err()
	}
	return res, nil
}

// killGroup stops a process group: SIGTERM, then SIGKILL after killGrace.
func killGroup(pgid int, waitc <-chan error) error {
	_ = syscall.Kill(-pgid, syscall.SIGCONT) // a stopped group cannot act on SIGTERM
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case err := <-waitc:
		return err
	case <-time.After(killGrace):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		return <-waitc
	}
}

// Snapshot archives the workspace as a compressed tarball.
func (l *Local) Snapshot(ctx context.Context, name, snapshot string) (SnapshotInfo, error) {
	sb, err := l.load(name)
	if err != nil {
		return SnapshotInfo{}, err
	}
	if !nameRE.MatchString(snapshot) {
		return SnapshotInfo{}, errorf(CodeFileOperation, nil, "invalid snapshot name %q", snapshot)
	}
	tmp := l.snapshotPath(snapshot) + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return SnapshotInfo{}, errorf(CodeFileOperation, err, "snapshot %q", snapshot)
	}
	gz := gzip.NewWriter(f)
	tw := tar.NewWriter(gz)
	err = tw.AddFS(os.DirFS(sb.Root))
	if err == nil {
		err = tw.Close()
	}
	if err == nil {
		err = gz.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	var info SnapshotInfo
	if err == nil {
		info, err = l.keepSnapshot(ctx, snapshot, tmp)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return SnapshotInfo{}, errorf(CodeFileOperation, err, "snapshot %q", snapshot)
	}
	return info, nil
}

func extract(archive, dest string) error {
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return err
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		target, err := within(dest, h.Name)
		if err != nil {
			return err
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			out, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&0o777)
			if err != nil {
				return err
			}
			_, err = io.Copy(out, tr)
			out.Close()
			if err != nil {
				return err
			}
		}
	}
}

// Pause stops every process of the sandbox (SIGSTOP to its groups) and
// marks it paused.
func (l *Local) Pause(_ context.Context, name string) error {
	sb, err := l.load(name)
	if err != nil {
		return err
	}
	if sb.hasCgroup("freezer") {
		if err := freeze(sb, "FROZEN"); err != nil {
			return errorf(CodeInvalidState, err, "pause sandbox %q", name)
		}
	} else {
		l.signalAll(name, syscall.SIGSTOP)
	}
	sb.State = StatePaused
	return l.save(sb)
}

// Resume continues a paused sandbox's processes.
func (l *Local) Resume(_ context.Context, name string) error {
	sb, err := l.load(name)
	if err != nil {
		return err
	}
	if sb.hasCgroup("freezer") {
		if err := freeze(sb, "THAWED"); err != nil {
			return errorf(CodeInvalidState, err, "resume sandbox %q", name)
		}
	}
	l.signalAll(name, syscall.SIGCONT)
	sb.State = StateRunning
	sb.LastActiveAt = l.Now().UTC()
	return l.save(sb)
}

// Delete kills the sandbox's processes and removes it.
func (l *Local) Delete(_ context.Context, name string) error {
	sb, err := l.load(name)
	if err != nil {
		return err
	}
	if sb.hasCgroup("freezer") {
		_ = freeze(sb, "THAWED")
	}
	l.signalAll(name, syscall.SIGCONT)
	l.signalAll(name, syscall.SIGKILL)
	removeCgroups(sb)
	if err := os.RemoveAll(l.dir(name)); err != nil {
		return errorf(CodeFileOperation, err, "delete sandbox %q", name)
	}
	return nil
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func killPid(pid int) { _ = syscall.Kill(pid, syscall.SIGKILL) }
