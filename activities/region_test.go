package activities

import (
	"context"
	"testing"

	"github.com/linefactory/linefactory/manifests/run"
	"github.com/linefactory/linefactory/store"
)

// A stage visit's job run records its job's run.region from its creation,
// as a started job run does (SPEC's job run `region`), not only once it runs.
func TestCreateStageRunRecordsRegion(t *testing.T) {
	ctx := context.Background()
	st := &lineStore{jobs: map[string]store.JobRun{}, lines: map[string]store.LineRun{"lr_1": {ID: "lr_1", Status: run.Running}}}
	a := &Activities{Store: st}
	for id, region := range map[string]string{"jr_eu": "eu-west-1", "jr_none": ""} {
		if _, err := a.CreateStageRun(ctx, CreateStageRunInput{JobRunID: id, LineRunID: "lr_1", Stage: "s", Region: region, Iteration: 1, Order: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if r := st.jobs["jr_eu"]; r.Status != run.Queued || r.Region == nil || *r.Region != "eu-west-1" {
		t.Fatalf("queued stage job run: status %s region %v, want queued eu-west-1", r.Status, r.Region)
	}
	if r := st.jobs["jr_none"]; r.Region != nil {
		t.Fatalf("a job without run.region: region %q, want nil", *r.Region)
	}
}
