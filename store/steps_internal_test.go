package store

import (
	"strings"
	"testing"
)

// TestStepRewriteStatementLazy: a lazy rewrite turns synchronous_commit off
// for its own transaction (is_local true), a durable one does not touch it.
func TestStepRewriteStatementLazy(t *testing.T) {
	rw := []stepRewrite{{pos: 0, old: "{}", new: `{"status":"running"}`}}
	lazy, _ := stepRewriteStatement("jr_1", rw, true)
	durable, args := stepRewriteStatement("jr_1", rw, false)
	if !strings.Contains(lazy, "set_config('synchronous_commit', 'off', true)") {
		t.Fatalf("lazy statement %s", lazy)
	}
	if strings.Contains(durable, "synchronous_commit") || len(args) != 4 {
		t.Fatalf("durable statement %s %v", durable, args)
	}
}
