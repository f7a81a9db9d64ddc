package sandbox

import (
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/linefactory/linefactory/manifests"
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

// A command's end is the sandbox's last activity at once for this driver
// (Get, Reap), while its state file is rewritten for it only once the time
// stored there is activeWrite old.
func TestLastActivityWithoutAWritePerCommand(t *testing.T) {
	ctx := context.Background()
	l := newLocal(t)
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := base
	l.Now = func() time.Time { return clock }
	idle := 60
	sb := acquire(t, l, Spec{Name: "busy", InternetEnabled: true, Lifecycle: &manifests.Lifecycle{PauseAfterIdle: &idle}})
	stored := func() time.Time {
		t.Helper()
		data, err := os.ReadFile(l.statePath(sb.Name))
		if err != nil {
			t.Fatal(err)
		}
		var s Sandbox
		if err := json.Unmarshal(data, &s); err != nil {
			t.Fatal(err)
		}
		return s.LastActiveAt
	}
	run := func(at time.Time) {
		t.Helper()
		clock = at
		if res, err := l.Exec(ctx, ExecRequest{Sandbox: sb.Name, Argv: []string{"true"}}); err != nil || res.ExitCode != 0 {
			t.Fatalf("exec: %+v %v", res, err)
		}
	}
	run(base.Add(10 * time.Second))
	if got := stored(); !got.Equal(base.Add(10 * time.Second)) {
		t.Fatalf("stored last activity %v, want the command's end %v (the one stored was 10 s old)", got, base.Add(10*time.Second))
	}
	end := base.Add(10*time.Second + activeWrite/2)
	run(end)
	if got := stored(); !got.Equal(base.Add(10 * time.Second)) {
		t.Fatalf("stored last activity %v: rewritten although it was younger than %v", got, activeWrite)
	}
	if got, err := l.Get(ctx, sb.Name); err != nil || !got.LastActiveAt.Equal(end) {
		t.Fatalf("Get: last activity %v (%v), want %v", got.LastActiveAt, err, end)
	}
	// idle 59.9 s since the last command, 60.4 s since the stored time: not due
	if rep, err := l.Reap(ctx, end.Add(59900*time.Millisecond)); err != nil || len(rep.Paused) != 0 {
		t.Fatalf("reaped %+v (%v) before it was idle 60 s", rep, err)
	}
	if rep, err := l.Reap(ctx, end.Add(60*time.Second)); err != nil || len(rep.Paused) != 1 {
		t.Fatalf("not paused when idle 60 s: %+v %v", rep, err)
	}
	if got := stored(); !got.Equal(end) {
		t.Fatalf("a later write (the pause) stored last activity %v, want %v", got, end)
	}
	// a sandbox made again under the same name starts afresh
	if err := l.Delete(ctx, sb.Name); err != nil {
		t.Fatal(err)
	}
	clock = base
	again := acquire(t, l, Spec{Name: "busy", InternetEnabled: true})
	if !again.LastActiveAt.Equal(base) {
		t.Fatalf("a new sandbox of the same name has last activity %v, want %v", again.LastActiveAt, base)
	}
}
