package codecheck

import (
	"bytes"
	"go/format"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGofmt: every Go file of the repository, tests included, is as gofmt
// writes it (CI runs the tests, not `make lint`).
func TestGofmt(t *testing.T) {
	root := repoRoot(t)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "node_modules", ".factory", "bin":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		out, err := format.Source(src)
		if err != nil {
			return err
		}
		if !bytes.Equal(src, out) {
			rel, _ := filepath.Rel(root, path)
			t.Errorf("%s is not gofmt'd (gofmt -w %s)", rel, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
