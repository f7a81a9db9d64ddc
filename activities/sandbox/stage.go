package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// Staging a command's mounts. bwrap runs as the sandbox's host user, who
// cannot reach the data directory (0700 root) nor a harness file in a
// private directory: bwrap resolves every source path as that user before
// it binds it. So the thread that starts the command (startOnThread, as
// root) first moves to a mount namespace of its own, a private copy of the
// host's, mounts a small tmpfs over stageDir there and binds each source at
// <stageDir>/<n>; bwrap, started from that thread, resolves and binds
// those. Nothing of it is seen on the host (the copy is private), and the
// namespace goes with the thread and the bwrap process that started in it.
// The command itself is in bwrap's own mount namespace, which shows only
// the mounts bwrap made.

// stageDir is the top-level directory the staging tmpfs covers in the
// staging namespace (never a source of the sandbox's view): the first of
// a few that every host has.
var stageDir = sync.OnceValue(func() string {
	for _, d := range []string{"/run", "/mnt", "/srv", "/media"} {
		if st, err := os.Lstat(d); err == nil && st.IsDir() {
			return d
		}
	}
	return "/run"
})

// stage lists the host paths a command's bwrap binds.
type stage struct {
	sources []string
	dev     bool
}

// devNodes are the devices of a sandbox's /dev (those bwrap's --dev gives).
var devNodes = []struct {
	name         string
	major, minor uint32
}{{"null", 1, 3}, {"zero", 1, 5}, {"full", 1, 7}, {"random", 1, 8}, {"urandom", 1, 9}, {"tty", 5, 0}}

// devLinks are its symlinks.
var devLinks = [][2]string{{"/proc/self/fd", "fd"}, {"/proc/self/fd/0", "stdin"}, {"/proc/self/fd/1", "stdout"},
	{"/proc/self/fd/2", "stderr"}, {"pts/ptmx", "ptmx"}, {"/proc/kcore", "core"}}

// addDev stages the command's /dev and returns the path bwrap binds it
// from (--dev-bind). It is what bwrap's --dev makes, built by root in the
// staging namespace: a tmpfs of root's (0755: the step writes nothing
// there) with the devices above, their links, shm and a new devpts
// instance at pts. Made by bwrap in the step's user namespace instead, it
// would cost a second user namespace (bwrap's way to mount devpts there)
// and a bind and a look at the mount table per device.
func (s *stage) addDev() string {
	s.dev = true
	return filepath.Join(stageDir(), "dev")
}

// add stages host (a directory or any other file) and returns the path
// bwrap binds it from.
func (s *stage) add(host string) string {
	s.sources = append(s.sources, host)
	return filepath.Join(stageDir(), strconv.Itoa(len(s.sources)-1))
}

// mount moves the calling thread to a private copy of the host's mount
// namespace and binds the sources at their staged paths. It runs on the
// thread that then starts bwrap, which must run nothing else afterwards.
func (s *stage) mount() error {
	if len(s.sources) == 0 && !s.dev {
		return nil
	}
	// CLONE_FS (which CLONE_NEWNS implies anyway): the thread's root, cwd
	// and umask become its own, so makeDev's umask is this thread's only.
	if err := unix.Unshare(unix.CLONE_NEWNS | unix.CLONE_FS); err != nil {
		return fmt.Errorf("staging mount namespace: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("staging mount namespace private: %w", err)
	}
	// The sources are held open first: one may be under stageDir, which
	// the tmpfs is about to cover.
	fds := make([]int, 0, len(s.sources))
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	for _, src := range s.sources {
		fd, err := unix.Open(src, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("stage %s for the sandbox: %w", src, err)
		}
		fds = append(fds, fd)
	}
	dir := stageDir()
	if err := unix.Mount("linefactory-stage", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0755,size=64k,nr_inodes=1024"); err != nil {
		return fmt.Errorf("staging tmpfs on %s: %w", dir, err)
	}
	if s.dev {
		if err := makeDev(filepath.Join(dir, "dev")); err != nil {
			return fmt.Errorf("the sandbox's /dev: %w", err)
		}
	}
	for i, src := range s.sources {
		target := filepath.Join(dir, strconv.Itoa(i))
		var st unix.Stat_t
		err := unix.Fstat(fds[i], &st)
		if err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			err = unix.Mkdir(target, 0o755)
		} else if err == nil { // a file, a socket...: a file to bind it on
			var fd int
			if fd, err = unix.Open(target, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o644); err == nil {
				unix.Close(fd)
			}
		}
		if err == nil { // the open file itself, wherever its path leads now
			err = unix.Mount("/proc/thread-self/fd/"+strconv.Itoa(fds[i]), target, "", unix.MS_BIND|unix.MS_REC, "")
		}
		if err != nil {
			return fmt.Errorf("stage %s for the sandbox: %w", src, err)
		}
	}
	return nil
}

// devBindOnly makes makeDev bind the host's device nodes as it does
// without CAP_MKNOD (tests of the fallback).
var devBindOnly bool

// makeDev makes the command's /dev at dir (addDev).
func makeDev(dir string) error {
	if err := unix.Mkdir(dir, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("linefactory-dev", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755,size=64k,nr_inodes=64"); err != nil {
		return err
	}
	old := unix.Umask(0)
	defer unix.Umask(old)
	for _, d := range devNodes {
		node := filepath.Join(dir, d.name)
		var err error = unix.EPERM
		if !devBindOnly {
			err = unix.Mknod(node, unix.S_IFCHR|0o666, int(unix.Mkdev(d.major, d.minor)))
		}
		if errors.Is(err, unix.EPERM) { // no CAP_MKNOD (a container): the host's node, bound
			var fd int
			if fd, err = unix.Open(node, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o666); err == nil {
				unix.Close(fd)
				err = unix.Mount("/dev/"+d.name, node, "", unix.MS_BIND, "")
			}
		}
		if err != nil {
			return err
		}
	}
	for _, l := range devLinks {
		if err := unix.Symlink(l[0], filepath.Join(dir, l[1])); err != nil {
			return err
		}
	}
	for _, d := range []string{"shm", "pts"} {
		if err := unix.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	return unix.Mount("devpts", filepath.Join(dir, "pts"), "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=620")
}
