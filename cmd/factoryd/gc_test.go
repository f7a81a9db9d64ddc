package main

import (
	"runtime/debug"
	"testing"
)

// TestGCPercent: serve's collector setting is defaultGCPercent without
// GOGC, and leaves the runtime's (GOGC's) alone with it.
func TestGCPercent(t *testing.T) {
	old := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(old) })

	t.Setenv("GOGC", "")
	setGCPercent()
	if got := debug.SetGCPercent(100); got != defaultGCPercent {
		t.Fatalf("without GOGC: GC percent %d, want %d", got, defaultGCPercent)
	}

	t.Setenv("GOGC", "150")
	debug.SetGCPercent(150) // what the runtime applied from GOGC at start
	setGCPercent()
	if got := debug.SetGCPercent(100); got != 150 {
		t.Fatalf("with GOGC=150: GC percent %d, want 150 (left as GOGC set it)", got)
	}
}
