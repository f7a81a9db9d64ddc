package agent

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestReadLimited: a file a step wrote is read only when it is a regular
// file within the cap; a link (to a host secret, say) or a FIFO is refused
// without being followed or blocking.
func TestReadLimited(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("host secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	regular := filepath.Join(dir, "regular")
	if err := os.WriteFile(regular, []byte("ok"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(secret, link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, []byte(strings.Repeat("x", 11)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path, data, err string
	}{
		{"regular", regular, "ok", ""},
		{"missing", filepath.Join(dir, "none"), "", ""},
		{"symlink", link, "", "not a regular file"},
		{"fifo", fifo, "", "not a regular file"},
		{"over the cap", big, "", "over the 10 byte cap"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := ReadLimited(tc.path, 10)
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("err = %v, want %q", err, tc.err)
			}
			if string(data) != tc.data {
				t.Fatalf("data = %q, want %q", data, tc.data)
			}
		})
	}
}
