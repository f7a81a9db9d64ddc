package sandbox

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Isolation modes of the local driver.
const (
	// IsolationBwrap runs every command of a sandbox under bubblewrap as an
	// unprivileged user, in its own user, mount, PID, IPC, UTS and network
	// namespaces, seeing a read-only system view, its workspace and its own
	// /tmp. Networking, when allowed, goes through slirp4netns with the
	// host's loopback and addresses out of reach.
	IsolationBwrap = "bwrap"
	// IsolationNone runs commands on the host as factoryd's user: only for
	// hosts that cannot isolate, chosen explicitly by the operator.
	IsolationNone = "none"
)

// Options configure the local driver.
type Options struct {
	// Isolation is IsolationBwrap (the default) or IsolationNone.
	Isolation string
}

// hostUIDBase and hostUIDSpan give each sandbox an unprivileged host uid
// (and gid) of its own, derived from its name: its files and processes
// belong to nobody else on the host.
const (
	hostUIDBase = 200000
	hostUIDSpan = 100000
)

// defaultUser is the user steps run as inside the sandbox when they name
// none.
const (
	defaultUser = "sandbox"
	defaultUID  = 1000
)

// CheckIsolation tells whether this host can isolate sandboxes: bwrap and
// slirp4netns installed, and a user namespace with a network and PID
// namespace can be made by an unprivileged uid. The error says what is
// missing.
func CheckIsolation() error {
	for _, tool := range []string{"bwrap", "slirp4netns"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s is not installed (Debian: apt-get install bubblewrap slirp4netns)", tool)
		}
	}
	if os.Geteuid() != 0 {
		return errors.New("factoryd must run as root to give each sandbox its own unprivileged user")
	}
	cmd := exec.Command("bwrap", "--unshare-all", "--unshare-user", "--die-with-parent", "--ro-bind", "/", "/", "--proc", "/proc", "--", "/bin/true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: hostUIDBase, Gid: hostUIDBase}, Pdeathsig: syscall.SIGKILL}
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	// Pdeathsig follows the forking thread: forked from any thread of the
	// runtime, the probe was killed when a goroutine that locked that
	// thread (a launcher, a staging thread) ended with it. Its own thread
	// lives until the probe ends.
	var out []byte
	var err error
	done := make(chan struct{})
	onOwnThread(func() {
		defer close(done)
		out, err = cmd.CombinedOutput()
	})
	<-done
	if err != nil {
		return fmt.Errorf("bwrap cannot create namespaces as an unprivileged user (the kernel may forbid user namespaces: see user.max_user_namespaces, kernel.apparmor_restrict_unprivileged_userns): %v: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// hostUID is the host uid (and gid) a sandbox's processes and files have.
func hostUID(group string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(group))
	return hostUIDBase + 1 + int(h.Sum32()%(hostUIDSpan-1))
}

// chownTree gives everything under root to uid (symlinks themselves, not
// their targets).
func chownTree(root string, uid int) error {
	return filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, uid)
	})
}

// mkdirOwned creates dir (inside root) and its missing parents, owned by uid.
func mkdirOwned(root, dir string, uid int) error {
	rel, err := filepath.Rel(root, dir)
	if err != nil || rel == "." {
		return err
	}
	cur := root
	for _, part := range strings.Split(rel, string(filepath.Separator)) {
		cur = filepath.Join(cur, part)
		if err := os.Mkdir(cur, 0o755); err != nil {
			if errors.Is(err, fs.ErrExist) {
				continue
			}
			return err
		}
		if uid > 0 {
			if err := os.Lchown(cur, uid, uid); err != nil {
				return err
			}
		}
	}
	return nil
}

// stepUser resolves a step's user to a uid inside the sandbox and the
// passwd and group files the sandbox sees: "" is an unprivileged "sandbox"
// user, a number is that uid, a name known to the host keeps its uid, and
// any other name gets the default uid. root is root of the sandbox's own
// user namespace, with no capabilities: it owns nothing of the host.
func stepUser(user, home string) (uid int, passwd, group []byte) {
	if user == "" {
		user = defaultUser
	}
	uid, name := defaultUID, user
	if n, err := strconv.Atoi(user); err == nil && n >= 0 && n < 65534 {
		uid, name = n, ""
	} else if n, ok := lookupUID(user); ok {
		uid = n
	}
	hostPasswd, _ := os.ReadFile("/etc/passwd")
	hostGroup, _ := os.ReadFile("/etc/group")
	if name == "" {
		name = nameOf(hostPasswd, uid)
		if name == "" {
			name = "u" + strconv.Itoa(uid)
		}
	}
	passwd = append(dropEntries(hostPasswd, name, uid), fmt.Sprintf("%s:x:%d:%d::%s:/bin/sh\n", name, uid, uid, home)...)
	group = append(dropEntries(hostGroup, name, uid), fmt.Sprintf("%s:x:%d:\n", name, uid)...)
	return uid, passwd, group
}

func lookupUID(name string) (int, bool) {
	data, _ := os.ReadFile("/etc/passwd")
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Split(sc.Text(), ":")
		if len(f) > 2 && f[0] == name {
			n, err := strconv.Atoi(f[2])
			return n, err == nil && n < 65534
		}
	}
	return 0, false
}

func nameOf(passwd []byte, uid int) string {
	sc := bufio.NewScanner(bytes.NewReader(passwd))
	for sc.Scan() {
		if f := strings.Split(sc.Text(), ":"); len(f) > 2 && f[2] == strconv.Itoa(uid) {
			return f[0]
		}
	}
	return ""
}

// dropEntries removes the lines of a passwd or group file whose name or id
// is taken by the step's user.
func dropEntries(file []byte, name string, id int) []byte {
	var out bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(file))
	for sc.Scan() {
		f := strings.Split(sc.Text(), ":")
		if len(f) > 2 && (f[0] == name || f[2] == strconv.Itoa(id)) {
			continue
		}
		out.WriteString(sc.Text() + "\n")
	}
	return out.Bytes()
}

// systemView lists the bwrap arguments that show the host's system
// directories read-only: /usr, /etc and /opt bound, and /bin, /lib... as
// they are on the host (symlinks into /usr, or directories).
func systemView() []string {
	args := []string{"--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc", "--ro-bind-try", "/opt", "/opt"}
	for _, d := range []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"} {
		if target, err := os.Readlink(d); err == nil {
			args = append(args, "--symlink", target, d)
		} else if st, err := os.Stat(d); err == nil && st.IsDir() {
			args = append(args, "--ro-bind", d, d)
		}
	}
	return args
}
