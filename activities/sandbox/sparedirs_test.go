package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// spareDirsOf lists the spare directories in l's sandboxes directory.
func spareDirsOf(t *testing.T, l *Local) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(l.root, "sandboxes"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), spareDirMark) {
			out = append(out, filepath.Join(l.root, "sandboxes", e.Name()))
		}
	}
	return out
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// TestSpareDirs: a deleted sandbox that left its directory empty hands it
// to the next sandbox made, scrubbed (mode 0700, no extended attributes);
// one whose workspace holds anything is removed, never handed on.
func TestSpareDirs(t *testing.T) {
	l := newLocal(t)
	ctx := context.Background()
	a := acquire(t, l, Spec{})
	res, err := l.Exec(ctx, ExecRequest{Sandbox: a.Name, Argv: []string{"sh", "-c", "chmod 0777 ."}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("step: %+v %v", res, err)
	}
	xattr := unix.Setxattr(a.Root, "user.left", []byte("by a"), 0) == nil
	if !xattr {
		t.Log("SKIPPING the extended attribute check: this file system has no user attributes")
	}
	if err := l.Delete(ctx, a.Name); err != nil {
		t.Fatal(err)
	}
	spares := spareDirsOf(t, l)
	if len(spares) != 1 {
		t.Fatalf("spare directories after deleting an empty sandbox: %v", spares)
	}
	if _, err := os.Stat(filepath.Join(spares[0], "state.json")); !os.IsNotExist(err) {
		t.Fatalf("the spare keeps a state file: %v", err)
	}
	if _, err := l.Get(ctx, a.Name); CodeOf(err) != CodeNotFound {
		t.Fatalf("the deleted sandbox: %v", err)
	}
	ws := inode(t, filepath.Join(spares[0], "workspace"))

	b := acquire(t, l, Spec{})
	if got := spareDirsOf(t, l); len(got) != 0 {
		t.Fatalf("the spare was not taken: %v", got)
	}
	if inode(t, b.Root) != ws {
		t.Fatal("the new sandbox's workspace is not the spare's")
	}
	fi, err := os.Stat(b.Root)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("workspace mode %v %v, want 0700", fi.Mode(), err)
	}
	if n, err := unix.Listxattr(b.Root, make([]byte, 256)); xattr && (err != nil || n != 0) {
		t.Fatalf("the workspace keeps %d bytes of extended attributes (%v)", n, err)
	}
	if got, err := l.Get(ctx, b.Name); err != nil || got.Root != b.Root || got.State != StateRunning {
		t.Fatalf("the new sandbox: %+v %v", got, err)
	}

	// Something left in the workspace: the directory goes.
	if err := os.WriteFile(filepath.Join(b.Root, "secret"), []byte("b's"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := l.Delete(ctx, b.Name); err != nil {
		t.Fatal(err)
	}
	if got := spareDirsOf(t, l); len(got) != 0 {
		t.Fatalf("a sandbox that left a file was kept as a spare: %v", got)
	}
	if _, err := os.Stat(l.dir(b.Name)); !os.IsNotExist(err) {
		t.Fatalf("its directory: %v", err)
	}
	c := acquire(t, l, Spec{})
	if entries, _ := os.ReadDir(c.Root); len(entries) != 0 {
		t.Fatalf("a new sandbox's workspace holds %v", entries)
	}

	// At most spareDirsMax are kept.
	var made []Sandbox
	for range spareDirsMax + 2 {
		made = append(made, acquire(t, l, Spec{}))
	}
	for _, sb := range made {
		if err := l.Delete(ctx, sb.Name); err != nil {
			t.Fatal(err)
		}
	}
	if got := spareDirsOf(t, l); len(got) != spareDirsMax {
		t.Fatalf("%d spare directories, want %d", len(got), spareDirsMax)
	}

	// A spare of a worker no longer running goes at the next worker's
	// start; this driver's stay until it closes.
	dead := filepath.Join(l.root, "sandboxes", spareDirMark+"1.1-7")
	if err := os.MkdirAll(filepath.Join(dead, "workspace"), 0o700); err != nil {
		t.Fatal(err)
	}
	l.KillLeftovers()
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Fatalf("a dead worker's spare: %v", err)
	}
	if got := spareDirsOf(t, l); len(got) != spareDirsMax {
		t.Fatalf("%d spare directories after KillLeftovers, want %d", len(got), spareDirsMax)
	}
	l.Close()
	if got := spareDirsOf(t, l); len(got) != 0 {
		t.Fatalf("spare directories after Close: %v", got)
	}
}

// TestSpareDirsIsolated: under isolation a spare's workspace and /tmp
// belong to the new sandbox's user, and a step's ACL on them is gone.
func TestSpareDirsIsolated(t *testing.T) {
	l := newIsolated(t)
	ctx := context.Background()
	a := acquire(t, l, Spec{})
	acl := unix.Setxattr(a.Root, "system.posix_acl_default", posixACL(), 0) == nil
	if !acl {
		t.Log("SKIPPING the ACL check: this file system has no ACLs")
	}
	if err := l.Delete(ctx, a.Name); err != nil {
		t.Fatal(err)
	}
	if got := spareDirsOf(t, l); len(got) != 1 {
		t.Fatalf("spare directories: %v", got)
	}
	b := acquire(t, l, Spec{})
	if b.HostUID == a.HostUID || b.HostUID == 0 {
		t.Fatalf("host users %d and %d", a.HostUID, b.HostUID)
	}
	for _, d := range []string{b.Root, l.tmpDir(b.Name)} {
		var st syscall.Stat_t
		if err := syscall.Stat(d, &st); err != nil || int(st.Uid) != b.HostUID || st.Mode&0o7777 != 0o700 {
			t.Fatalf("%s: uid %d mode %o (%v), want %d 0700", d, st.Uid, st.Mode&0o7777, err, b.HostUID)
		}
	}
	if _, err := unix.Getxattr(b.Root, "system.posix_acl_default", nil); acl && err == nil {
		t.Fatal("the default ACL a's user set is on b's workspace")
	}
	res, err := l.Exec(ctx, ExecRequest{Sandbox: b.Name, Argv: []string{"sh", "-c", "touch f && ls -A"}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("a step in the new sandbox: %+v %v", res, err)
	}
}

// posixACL is a default ACL (user::rwx, group::---, other::---, user 12345
// rwx, mask rwx) in the kernel's xattr form.
func posixACL() []byte {
	entry := func(tag, perm uint16, id uint32) []byte {
		return []byte{byte(tag), byte(tag >> 8), byte(perm), byte(perm >> 8), byte(id), byte(id >> 8), byte(id >> 16), byte(id >> 24)}
	}
	b := []byte{2, 0, 0, 0} // version 2
	b = append(b, entry(0x01, 7, 0xffffffff)...)
	b = append(b, entry(0x02, 7, 12345)...)
	b = append(b, entry(0x04, 0, 0xffffffff)...)
	b = append(b, entry(0x10, 7, 0xffffffff)...)
	b = append(b, entry(0x20, 0, 0xffffffff)...)
	return b
}
