package sandbox

import (
	"context"
	"testing"
)

// The cached state of a sandbox follows the file: a change made by another
// driver on the same root (another process, or this one after a restart)
// is seen, a deleted sandbox is gone, and a caller's changes to what it got
// never reach the cache.
func TestStateCacheFollowsTheFile(t *testing.T) {
	ctx := context.Background()
	a := newLocal(t)
	b, err := NewLocalWith(a.root, Options{Isolation: IsolationNone})
	if err != nil {
		t.Fatal(err)
	}
	sb := acquire(t, a, Spec{Name: "cached", InternetEnabled: true, Env: map[string]string{"K": "v"}})
	if res, err := a.Exec(ctx, ExecRequest{Sandbox: sb.Name, Argv: []string{"true"}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("exec: %+v %v", res, err)
	}
	got, err := a.Get(ctx, sb.Name)
	if err != nil || got.State != StateRunning || got.Created {
		t.Fatalf("get: %+v %v", got, err)
	}
	got.Env["K"], got.State = "changed", StatePaused
	if again, _ := a.Get(ctx, sb.Name); again.Env["K"] != "v" || again.State != StateRunning {
		t.Fatalf("a caller's change reached the cache: %+v", again)
	}
	// the other driver pauses it: the first sees it paused
	if err := b.Pause(ctx, sb.Name); err != nil {
		t.Fatal(err)
	}
	if got, err := a.Get(ctx, sb.Name); err != nil || got.State != StatePaused {
		t.Fatalf("after another driver paused it: %+v %v", got, err)
	}
	if err := a.Resume(ctx, sb.Name); err != nil {
		t.Fatal(err)
	}
	if got, err := b.Get(ctx, sb.Name); err != nil || got.State != StateRunning {
		t.Fatalf("after the first resumed it: %+v %v", got, err)
	}
	if err := b.Delete(ctx, sb.Name); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Get(ctx, sb.Name); CodeOf(err) != CodeNotFound {
		t.Fatalf("deleted by another driver, got %v", err)
	}
}
