package sandbox

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Spare sandbox directories. Making a sandbox's directory and workspace
// (two mkdirs) and removing them (two rmdirs) is cheap on most file
// systems, but on ext4 without a journal (as virtual machines' disks often
// are) allocating an inode skips every inode of its group freed in the last
// 30 seconds: with the sandboxes of a few stages a second the two mkdirs
// cost about 0.4 ms of kernel time (perf, 20 lines at once). So Delete keeps
// the directory of a sandbox it leaves empty (nothing but its state file,
// an empty workspace and an empty /tmp) as a spare: it is renamed to
// .spare-<owner>-<n> in the sandboxes directory (no sandbox can have a name
// that starts with a dot) and renamed into place by the next sandbox made.
// The workspace and /tmp it hands on are scrubbed of what a step could
// have left on them: their mode is 0700 again, their extended attributes
// (ACLs included) go and they belong to the new sandbox's user.

// spareDirsMax is how many spare directories a driver keeps.
const spareDirsMax = 8

// spareDirMark starts a spare directory's name.
const spareDirMark = ".spare-"

// keepDir keeps the directory of sandbox sb, being deleted, as a spare and
// reports whether it did; false leaves it to removeDir.
func (l *Local) keepDir(sb Sandbox) bool {
	l.dirmu.Lock()
	full := len(l.spareDirs) >= spareDirsMax
	l.dirmu.Unlock()
	if full {
		return false
	}
	for _, g := range sandboxGroups(sb) {
		if _, err := os.Stat(g); err == nil {
			return false // a process of the sandbox may live on
		}
	}
	dir := l.dir(sb.Name)
	names, err := dirNames(dir, 4)
	if err != nil || len(names) > 3 {
		return false
	}
	for _, n := range names {
		switch n {
		case "state.json":
		case "workspace", "tmp":
			if inner, err := dirNames(filepath.Join(dir, n), 1); err != nil || len(inner) > 0 {
				return false
			}
		default:
			return false
		}
	}
	if err := syscall.Unlink(l.statePath(sb.Name)); err != nil && !errors.Is(err, syscall.ENOENT) {
		return false
	}
	l.dirmu.Lock()
	defer l.dirmu.Unlock()
	if len(l.spareDirs) >= spareDirsMax {
		return false
	}
	l.spareDirSeq++
	spare := filepath.Join(l.root, "sandboxes", spareDirMark+l.owner+"-"+strconv.FormatInt(l.spareDirSeq, 10))
	if err := syscall.Rename(dir, spare); err != nil {
		return false
	}
	l.spareDirs = append(l.spareDirs, spare)
	return true
}

// takeDir renames a spare directory into place as sandbox sb's and scrubs
// what it holds (scrubDir); false when there is none or it could not be
// used (makeDirs makes the directories then).
func (l *Local) takeDir(sb Sandbox) bool {
	l.dirmu.Lock()
	n := len(l.spareDirs)
	if n == 0 {
		l.dirmu.Unlock()
		return false
	}
	spare := l.spareDirs[n-1]
	l.spareDirs = l.spareDirs[:n-1]
	l.dirmu.Unlock()
	dir := l.dir(sb.Name)
	if err := syscall.Rename(spare, dir); err != nil {
		_ = os.RemoveAll(spare) // the name holds a directory already: makeDirs uses it
		return false
	}
	for _, d := range []string{sb.Root, l.tmpDir(sb.Name)} {
		if err := scrubDir(d); err != nil && !errors.Is(err, syscall.ENOENT) {
			_ = os.RemoveAll(dir)
			return false
		}
	}
	return true
}

// scrubDir makes an empty directory a previous sandbox had as if new: mode
// 0700 and no extended attributes (makeDirs gives it its owner).
func scrubDir(d string) error {
	if err := syscall.Chmod(d, 0o700); err != nil {
		return err
	}
	buf := make([]byte, 1024)
	n, err := unix.Llistxattr(d, buf)
	if errors.Is(err, syscall.ERANGE) {
		if n, err = unix.Llistxattr(d, nil); err == nil {
			buf = make([]byte, n)
			n, err = unix.Llistxattr(d, buf)
		}
	}
	if err != nil && !errors.Is(err, syscall.ENOTSUP) {
		return err
	}
	for _, name := range strings.Split(string(buf[:max(n, 0)]), "\x00") {
		if name == "" {
			continue
		}
		if err := unix.Lremovexattr(d, name); err != nil && !errors.Is(err, unix.ENODATA) {
			return err
		}
	}
	return nil
}

// dirNames lists up to n names in directory d.
func dirNames(d string, n int) ([]string, error) {
	f, err := os.Open(d)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(n)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return names, err
}

// dropSpareDirs removes this driver's spare directories (Close).
func (l *Local) dropSpareDirs() {
	l.dirmu.Lock()
	spares := l.spareDirs
	l.spareDirs = nil
	l.dirmu.Unlock()
	for _, d := range spares {
		_ = os.RemoveAll(d)
	}
}

// removeLeftSpareDirs removes the spare directories that workers no longer
// running left in the sandboxes directory (KillLeftovers).
func (l *Local) removeLeftSpareDirs() {
	parent := filepath.Join(l.root, "sandboxes")
	entries, _ := os.ReadDir(parent)
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), spareDirMark)
		if owner := spareOwner(rest); ok && owner != l.owner && !alive(owner) {
			_ = os.RemoveAll(filepath.Join(parent, e.Name()))
		}
	}
}
