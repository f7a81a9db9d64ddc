package activities

import (
	"context"
	"testing"

	"github.com/linefactory/linefactory/activities/sandbox"
	"github.com/linefactory/linefactory/manifests"
	"github.com/linefactory/linefactory/store"
)

// TeardownSandbox with ProvisionedBy (teardown_on_complete unset) deletes
// only what that run provisioned without a lifecycle, as FinishRun's own
// teardown does: an ensure sandbox, one with a lifecycle and another run's
// stay.
func TestTeardownSandboxProvisionedBy(t *testing.T) {
	drv, err := sandbox.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(drv.Close) // its idle sandboxes' cgroups go with it
	a := &Activities{Store: &runStore{runs: map[string]store.JobRun{}}, Sandboxes: drv}
	ctx := context.Background()
	online, idle := true, 60
	acquire := func(run string, cfg *manifests.SandboxConfig) string {
		res, err := a.AcquireSandbox(ctx, AcquireSandboxInput{RunID: run, Task: "t", Params: map[string]any{}, Config: cfg})
		if err != nil {
			t.Fatal(err)
		}
		return res.Name
	}
	plain := acquire("jr_1", &manifests.SandboxConfig{Mode: manifests.SandboxProvision, Image: "debian", InternetEnabled: &online})
	other := acquire("jr_2", &manifests.SandboxConfig{Mode: manifests.SandboxProvision, Image: "debian", InternetEnabled: &online})
	kept := acquire("jr_3", &manifests.SandboxConfig{Mode: manifests.SandboxProvision, Image: "debian", InternetEnabled: &online,
		Lifecycle: &manifests.Lifecycle{PauseAfterIdle: &idle}})
	ensured := acquire("jr_1", &manifests.SandboxConfig{Mode: manifests.SandboxEnsure, Name: "box", Image: "debian", InternetEnabled: &online})
	for _, c := range []struct {
		name, by string
		gone     bool
	}{{plain, "jr_1", true}, {other, "jr_1", false}, {kept, "jr_3", false}, {ensured, "jr_1", false}} {
		if err := a.TeardownSandbox(ctx, TeardownSandboxInput{Name: c.name, ProvisionedBy: c.by}); err != nil {
			t.Fatal(err)
		}
		_, err := drv.Get(ctx, c.name)
		if gone := sandbox.CodeOf(err) == sandbox.CodeNotFound; gone != c.gone {
			t.Errorf("%s after a teardown for %s: gone = %v, want %v", c.name, c.by, gone, c.gone)
		}
	}
}
