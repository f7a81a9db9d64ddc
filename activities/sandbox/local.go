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
	"strings"
	"sync"
	"syscall"
	"time"
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
	isolation   string // IsolationBwrap or IsolationNone

	cgmu     sync.Mutex            // serialises making and removing a sandbox's cgroups
	pools    map[string]*groupPool // sandbox name → its kept cgroups (cgpool.go); cgmu
	spares   []*spare              // spare groups with a launcher (launcher.go); cgmu
	filling  bool                  // spares are being made; cgmu
	closed   bool                  // Close was called: no more spares; cgmu
	mu       sync.Mutex
	groups   map[string]map[int]bool // sandbox name → running process groups
	building map[string]bool         // sandboxes being provisioned now
	owner    string                  // marks step processes as this process's

	dirmu       sync.Mutex
	spareDirs   []string // spare sandbox directories (sparedirs.go); dirmu
	spareDirSeq int64    // dirmu

	stmu   sync.Mutex
	states map[string]stateEntry // sandbox name → its state file as last read or written (statecache.go)
	active map[string]time.Time  // sandbox name → when its last command ended (statecache.go)

	hmu     sync.Mutex         // after cgmu when both are held
	holders map[string]*holder // sandbox name → its kept namespaces (holder.go); hmu
	holding map[string]bool    // sandboxes whose holder is being made; hmu

	netmu sync.Mutex
	nets  map[string]*netEntry // sandbox name → its commands' network namespace

	// Snapshots is the shared snapshot storage; nil keeps archives in
	// <root>/snapshots (one worker).
	Snapshots *Snapshots
}

// NewLocal returns a local driver rooted at dir that isolates its
// sandboxes (IsolationBwrap).
func NewLocal(dir string) (*Local, error) { return NewLocalWith(dir, Options{}) }

// NewLocalWith returns a local driver rooted at dir. With IsolationBwrap it
// fails when the host cannot isolate (CheckIsolation).
func NewLocalWith(dir string, o Options) (*Local, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	switch o.Isolation {
	case "", IsolationBwrap:
		o.Isolation = IsolationBwrap
		if err := CheckIsolation(); err != nil {
			return nil, fmt.Errorf("sandbox isolation: %w", err)
		}
	case IsolationNone:
	default:
		return nil, fmt.Errorf("unknown sandbox isolation %q (bwrap or none)", o.Isolation)
	}
	for _, d := range []string{"sandboxes", "snapshots"} {
		if err := os.MkdirAll(filepath.Join(abs, d), 0o700); err != nil {
			return nil, fmt.Errorf("sandbox root: %w", err)
		}
	}
	_ = os.Chmod(abs, 0o700)
	sum := sha256.Sum256([]byte(abs))
	return &Local{root: abs, Now: time.Now, groups: map[string]map[int]bool{}, building: map[string]bool{}, nets: map[string]*netEntry{}, states: map[string]stateEntry{}, active: map[string]time.Time{}, pools: map[string]*groupPool{}, holders: map[string]*holder{}, holding: map[string]bool{},
		groupPrefix: hex.EncodeToString(sum[:4]), owner: processID(os.Getpid()), isolation: o.Isolation}, nil
}

func (l *Local) isolated() bool { return l.isolation == IsolationBwrap }

// tmpDir is a sandbox's /tmp on the host.
func (l *Local) tmpDir(name string) string { return filepath.Join(l.dir(name), "tmp") }

func (l *Local) dir(name string) string       { return filepath.Join(l.root, "sandboxes", name) }
func (l *Local) statePath(name string) string { return filepath.Join(l.dir(name), "state.json") }
func (l *Local) snapshotPath(name string) string {
	return filepath.Join(l.root, "snapshots", name+".tar.gz")
}

func (l *Local) load(name string) (Sandbox, error) {
	if !nameRE.MatchString(name) {
		return Sandbox{}, errorf(CodeNotFound, nil, "invalid sandbox name %q", name)
	}
	// The cache is checked with one stat of the path; the file is opened
	// (about eight system calls with Go's poller checks) only to read a
	// version it does not hold.
	fi, err := os.Stat(l.statePath(name))
	if err == nil {
		if sb, ok := l.cached(name, fi); ok {
			return sb, nil
		}
	}
	f, err := os.Open(l.statePath(name))
	if errors.Is(err, fs.ErrNotExist) {
		l.forget(name)
		return Sandbox{}, errorf(CodeNotFound, nil, "sandbox %q does not exist", name)
	}
	if err != nil {
		return Sandbox{}, errorf(CodeFileOperation, err, "read sandbox %q", name)
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return Sandbox{}, errorf(CodeFileOperation, err, "read sandbox %q", name)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return Sandbox{}, errorf(CodeFileOperation, err, "read sandbox %q", name)
	}
	var sb Sandbox
	if err := json.Unmarshal(data, &sb); err != nil {
		return Sandbox{}, errorf(CodeFileOperation, err, "sandbox %q state", name)
	}
	l.remember(name, sb, fi) // the open file: the version just read
	l.stmu.Lock()
	defer l.stmu.Unlock()
	return l.withActive(sb), nil
}

func (l *Local) save(sb Sandbox) error {
	data, err := json.MarshalIndent(sb, "", "  ")
	if err != nil {
		return err
	}
	// A file of its own per write: the version renamed into place holds
	// only this write, so what the cache keeps matches it.
	f, err := os.CreateTemp(l.dir(sb.Name), "state.json.*.tmp")
	if err != nil {
		return errorf(CodeFileOperation, err, "save sandbox %q", sb.Name)
	}
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		_ = os.Remove(f.Name())
		return errorf(CodeFileOperation, err, "save sandbox %q", sb.Name)
	}
	if err := syscall.Rename(f.Name(), l.statePath(sb.Name)); err != nil { // os.Rename would stat the target first
		err = &os.LinkError{Op: "rename", Old: f.Name(), New: l.statePath(sb.Name), Err: err}
		_ = os.Remove(f.Name())
		l.remember(sb.Name, Sandbox{}, nil)
		return err
	}
	// Stated through the descriptor after the rename (which changes the
	// file's ctime): the version written, wherever the path points now.
	fi, _ := f.Stat()
	l.remember(sb.Name, sb, fi)
	return nil
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
	sb := l.newSandbox(name, spec)
	fail := func(err error) (Sandbox, error) {
		l.signalAll(name, syscall.SIGKILL)
		l.cgmu.Lock()
		l.dropGroupsLocked(sb)
		removeCgroups(sb)
		l.cgmu.Unlock()
		l.dropNet(name)
		_ = os.RemoveAll(l.dir(name))
		l.forget(name)
		if ctx.Err() != nil {
			return Sandbox{}, ctx.Err()
		}
		if CodeOf(err) == "" {
			err = errorf(CodeProvisioningFailed, err, "provision sandbox %q", name)
		}
		return Sandbox{}, err
	}
	if err := l.makeDirs(sb); err != nil {
		return fail(err)
	}
	describeLimits(&sb)
	if !spec.InternetEnabled && !l.isolated() {
		if err := checkNetns(); err != nil {
			return fail(errorf(CodeProvisioningFailed, err, "internet_enabled = false needs a network namespace, which this host cannot create"))
		}
		sb.LimitsApplied["internet_enabled"] = "enforced for steps: they run in a new network namespace (loopback only); sources and setup scripts have the network"
	}
	if spec.SnapshotName == "" && len(spec.Sources) == 0 && len(spec.SetupScripts) == 0 {
		// Nothing to fill: running as soon as it is recorded (one write of
		// the state file instead of two and a read).
		sb.State = StateRunning
		if err := l.save(sb); err != nil {
			return fail(err)
		}
		return sb, nil
	}
	if err := l.save(sb); err != nil {
		return fail(err)
	}
	if err := l.provision(ctx, sb, spec); err != nil {
		return fail(err)
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

// newSandbox describes a sandbox about to be made.
func (l *Local) newSandbox(name string, spec Spec) Sandbox {
	now := l.Now().UTC()
	sb := Sandbox{Name: name, Root: filepath.Join(l.dir(name), "workspace"), State: StateProvisioning, Image: spec.Image,
		Vcpus: spec.Vcpus, MemoryMB: spec.MemoryMB, InternetEnabled: spec.InternetEnabled, Env: spec.Env,
		Lifecycle: spec.Lifecycle, CreatedAt: now, LastActiveAt: now, Created: true, ProvisionKey: spec.Key, Mode: spec.Mode,
		Isolation: l.isolation, CgroupName: l.groupPrefix + "-" + name,
		LimitsApplied: map[string]string{
			"disk_gb":   "recorded, not enforced by the local driver",
			"image":     "recorded: the local driver shows the host's system directories read-only",
			"isolation": isolationNote(l.isolation),
		},
	}
	if l.isolated() {
		sb.HostUID = hostUID(sb.CgroupName)
	}
	return sb
}

// provision fills a new sandbox: the snapshot, the sources, the setup
// scripts (with the network and the params' variables).
func (l *Local) provision(ctx context.Context, sb Sandbox, spec Spec) error {
	if spec.SnapshotName != "" {
		archive, done, err := l.snapshotArchive(ctx, spec.SnapshotName)
		if err == nil {
			err = extract(archive, sb.Root)
			done()
		}
		if err == nil && sb.HostUID > 0 {
			err = chownTree(sb.Root, sb.HostUID)
		}
		if err != nil {
			return errorf(CodeProvisioningFailed, err, "restore snapshot %q", spec.SnapshotName)
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
		if err == nil && l.isolated() {
			dest = filepath.Join(insideRoot, target)
		}
		if err != nil {
			return err
		}
		err = l.clone(ctx, sb, append(args, "--", src.RepoURL, dest))
		if err != nil {
			return errorf(CodeProvisioningFailed, err, "clone sources[%d] %s", i, src.RepoURL)
		}
	}
	for i, sc := range spec.SetupScripts {
		var out bytes.Buffer
		res, err := l.Exec(ctx, ExecRequest{Sandbox: sb.Name, Argv: []string{sc.Script}, Env: spec.SetupEnv, Stdout: &out, Stderr: &out, Network: true})
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("exit %d: %s", res.ExitCode, tail(out.String()))
		}
		if err != nil {
			label := sc.Name
			if label == "" {
				label = fmt.Sprintf("setup_scripts[%d]", i)
			}
			return errorf(CodeProvisioningFailed, err, "setup script %s failed", label)
		}
	}
	return nil
}

func tail(s string) string {
	if len(s) > 2000 {
		return "…" + s[len(s)-2000:]
	}
	return s
}

// within resolves rel inside root and rejects paths that leave it, also
// through symlinks.
func within(root, rel string) (string, error) {
	if filepath.IsAbs(rel) {
		return "", errorf(CodeFileOperation, nil, "path %q must be relative to the sandbox workspace", rel)
	}
	p := filepath.Join(root, rel)
	if p == root {
		return p, nil // the workspace itself, which factoryd made
	}
	if !strings.HasPrefix(p, root+string(filepath.Separator)) {
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
	if hasFreezer() {
		if err := freezeAll(sb); err != nil {
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
	if hasFreezer() {
		if _, err := freeze(sb, "THAWED"); err != nil {
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
	l.signalAll(name, syscall.SIGCONT)
	l.signalAll(name, syscall.SIGKILL)
	l.cgmu.Lock()
	l.dropGroupsLocked(sb)
	removeCgroups(sb)
	l.fillSpares() // now that its groups are gone (launcher.go)
	l.cgmu.Unlock()
	l.releaseNet(name)
	if !l.keepDir(sb) {
		err = l.removeDir(sb)
	}
	l.forget(name)
	if err != nil {
		return errorf(CodeFileOperation, err, "delete sandbox %q", name)
	}
	return nil
}

// releaseNet ends a deleted sandbox's shared namespace without waiting for
// it to go: slirp4netns is killed now, and reaped (and the namespace's
// descriptor closed) in the background. An exiting slirp4netns takes the
// kernel ~15 ms to remove its tap device (the bulk of a Delete), and
// nothing is left to use the namespace: the sandbox's processes are killed
// and its entry is gone, so a sandbox made again under the name gets a new
// one.
func (l *Local) releaseNet(name string) {
	l.netmu.Lock()
	e := l.nets[name]
	delete(l.nets, name)
	l.netmu.Unlock()
	if e == nil {
		return
	}
	if n := e.made(); n != nil {
		n.kill()
		go n.close()
	}
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

// removeDir removes a sandbox's directory. A sandbox left as it was made
// (its state file, an empty workspace and /tmp: a job whose steps wrote
// nothing there) goes with four system calls; os.RemoveAll, which lists
// every directory it removes, takes about twenty.
func (l *Local) removeDir(sb Sandbox) error {
	dir := l.dir(sb.Name)
	tmpGone := func() bool { err := syscall.Rmdir(l.tmpDir(sb.Name)); return err == nil || err == syscall.ENOENT }
	if syscall.Unlink(l.statePath(sb.Name)) == nil && syscall.Rmdir(filepath.Join(dir, "workspace")) == nil &&
		tmpGone() && syscall.Rmdir(dir) == nil {
		return nil
	}
	return os.RemoveAll(dir)
}

// makeDirs makes a sandbox's workspace and, under isolation, its /tmp
// (without isolation steps use the host's /tmp: ensureTmp makes it when a
// worker restarted with isolation runs a step there), owned by its host user.
func (l *Local) makeDirs(sb Sandbox) error {
	// A spare directory (sparedirs.go) has its workspace, and under
	// isolation its /tmp, already: they get their owner below.
	if !l.takeDir(sb) {
		if err := os.Mkdir(l.dir(sb.Name), 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			if err := os.MkdirAll(l.dir(sb.Name), 0o700); err != nil {
				return err
			}
		}
	}
	dirs := []string{sb.Root}
	if l.isolated() {
		dirs = append(dirs, l.tmpDir(sb.Name))
	}
	for _, d := range dirs {
		if err := os.Mkdir(d, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		if sb.HostUID > 0 {
			if err := os.Chown(d, sb.HostUID, sb.HostUID); err != nil {
				return err
			}
		}
	}
	return nil
}

// ensureTmp makes the sandbox's /tmp, owned by its host user, if it has
// none.
func (l *Local) ensureTmp(sb Sandbox) error {
	err := os.Mkdir(l.tmpDir(sb.Name), 0o700)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err == nil && sb.HostUID > 0 {
		err = os.Chown(l.tmpDir(sb.Name), sb.HostUID, sb.HostUID)
	}
	return err
}

func isolationNote(mode string) string {
	if mode == IsolationNone {
		return "none (FACTORY_SANDBOX_ISOLATION=none): commands run on the host as factoryd's user, with its view of files, processes and network"
	}
	return "bwrap: an unprivileged user in its own user, mount, PID, IPC and network namespaces; a read-only system view, its workspace and its own /tmp; online through slirp4netns without the host's loopback, addresses or private ranges"
}

// clone runs git clone for a source. A remote repository is cloned inside
// the sandbox (with the network); a local one (a path or file:// URL),
// which the sandbox cannot see, by factoryd on the host, then given to the
// sandbox's user.
func (l *Local) clone(ctx context.Context, sb Sandbox, args []string) error {
	url := args[len(args)-2]
	var out bytes.Buffer
	if !l.isolated() || !(strings.HasPrefix(url, "/") || strings.HasPrefix(url, "file://")) {
		res, err := l.Exec(ctx, ExecRequest{Sandbox: sb.Name, Argv: append([]string{"git"}, args...), Stdout: &out, Stderr: &out, Network: true})
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("exit %d: %s", res.ExitCode, tail(out.String()))
		}
		return err
	}
	dest := filepath.Join(sb.Root, strings.TrimPrefix(args[len(args)-1], insideRoot))
	args[len(args)-1] = dest
	cmd := exec.CommandContext(ctx, "git", append([]string{"-c", "protocol.allow=never", "-c", "protocol.file.allow=always"}, args...)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + l.root, "GIT_TERMINAL_PROMPT=0"}
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%v: %s", err, tail(out.String()))
	}
	return chownTree(sb.Root, sb.HostUID)
}
