package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// ReapReport lists what a Reap pass did.
type ReapReport struct {
	Paused  []string
	Deleted []string
}

func (l *Local) busy(name string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.groups[name]) > 0
}

// Reap applies every sandbox's lifecycle at time now. All durations are
// seconds: pause_after_idle pauses a running sandbox idle (no command
// running, none finished) that long; pause_after pauses a running sandbox
// that old; delete_after deletes a sandbox idle that long, paused or not.
// A sandbox running a command is never reaped. The network namespace of a
// sandbox no command has used for netIdle is dropped (made again on use).
func (l *Local) Reap(ctx context.Context, now time.Time) (ReapReport, error) {
	var rep ReapReport
	l.dropIdleNets(now)
	entries, err := os.ReadDir(filepath.Join(l.root, "sandboxes"))
	if err != nil {
		return rep, errorf(CodeFileOperation, err, "list sandboxes")
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	for _, name := range names {
		if ctx.Err() != nil {
			return rep, ctx.Err()
		}
		sb, err := l.load(name)
		if err != nil || sb.Lifecycle == nil || l.busy(name) {
			continue
		}
		lc := sb.Lifecycle
		idle := now.Sub(sb.LastActiveAt)
		age := now.Sub(sb.CreatedAt)
		secs := func(p *int) time.Duration { return time.Duration(*p) * time.Second }
		switch {
		case lc.DeleteAfter != nil && idle >= secs(lc.DeleteAfter):
			if err := l.Delete(ctx, name); err == nil {
				rep.Deleted = append(rep.Deleted, name)
			}
		case sb.State == StateRunning && lc.PauseAfterIdle != nil && idle >= secs(lc.PauseAfterIdle),
			sb.State == StateRunning && lc.PauseAfter != nil && age >= secs(lc.PauseAfter):
			if err := l.Pause(ctx, name); err == nil {
				rep.Paused = append(rep.Paused, name)
			}
		}
	}
	return rep, nil
}

// WaitIdle waits until no command runs in the sandbox, at most limit.
func (l *Local) WaitIdle(ctx context.Context, name string, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for l.busy(name) && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
}
