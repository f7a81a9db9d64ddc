package activities

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/linefactory/linefactory/activities/sandbox"
	"github.com/linefactory/linefactory/manifests"
)

// idleWaiter is a driver that can wait for a sandbox's commands to end.
type idleWaiter interface {
	WaitIdle(ctx context.Context, name string, limit time.Duration)
}

// teardownGrace bounds how long teardown waits for the run's cancelled
// steps to end (they get killGrace after SIGTERM) before it kills them.
const teardownGrace = 4 * time.Second

// teardown removes the sandboxes a finished run leaves: all of them with
// teardown_on_complete = true; none with false; when it is not set, those
// this run provisioned that have no lifecycle (nothing would ever remove
// them). Sandboxes it ensured or reused, or that have a lifecycle, stay.
// (The driver holds no cgroup for an idle sandbox.)
func (a *Activities) teardown(ctx context.Context, in FinishRunInput) {
	t := in.Manifest.Run.TeardownOnComplete
	for _, name := range in.Sandboxes {
		if t != nil && !*t {
			return
		}
		sb, err := a.Sandboxes.Get(ctx, name)
		if t == nil && (err != nil || sb.Mode != manifests.SandboxProvision || sb.Lifecycle != nil ||
			!strings.HasPrefix(sb.ProvisionKey, in.RunID+"/")) {
			continue
		}
		if w, ok := a.Sandboxes.(idleWaiter); ok {
			w.WaitIdle(ctx, name, teardownGrace) // a cancelled step records its own end first
		}
		if err := a.Sandboxes.Delete(ctx, name); err != nil && sandbox.CodeOf(err) != sandbox.CodeNotFound && a.Logger != nil {
			a.Logger.Warn("teardown sandbox", slog.String("sandbox", name), slog.String("error", err.Error()))
		}
		a.unplaceIfGone(ctx, name, sb.Mode)
	}
}
