package main

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// benchDataDir is where make bench keeps its data (factoryd's and the
// embedded Temporal server's): FACTORY_BENCH_DIR, else .factory-bench in the
// checkout, beside .factory where `make run` keeps its data. Not the
// system's temporary directory: on the development VM /tmp lies in a crowded
// part of its ext4 disk, where the kernel spent 0.3-0.6 ms of CPU finding
// room for each new directory against 0.03-0.05 ms in the checkout, and a
// job's sandbox is a few directories: a cost of where the bench ran, which
// bare Temporal (no directories) does not pay. What making a directory costs
// where the bench ran is printed with the table (benchDirCost). The
// directory is removed at the end.
func benchDataDir(b *testing.B) string {
	parent := os.Getenv("FACTORY_BENCH_DIR")
	if parent == "" {
		parent = filepath.Join("..", "..", ".factory-bench")
	}
	if err := os.MkdirAll(parent, 0o700); err != nil {
		b.Fatal(err)
	}
	dir, err := os.MkdirTemp(parent, "bench-")
	if err != nil {
		b.Fatal(err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = os.RemoveAll(abs) })
	return abs
}

// benchDirCost is the milliseconds of making and removing a directory in
// dir: the mean over 300 made side by side and then removed, as sandboxes
// come and go.
func benchDirCost(b *testing.B, dir string) float64 {
	const n = 300
	rmdir := func(p string, _ uint32) error { return syscall.Rmdir(p) }
	t0 := time.Now()
	for _, op := range []func(string, uint32) error{syscall.Mkdir, rmdir} {
		for i := 0; i < n; i++ {
			if err := op(filepath.Join(dir, fmt.Sprintf("probe-%d", i)), 0o700); err != nil {
				b.Fatal(err)
			}
		}
	}
	return ms(time.Since(t0)) / n
}
