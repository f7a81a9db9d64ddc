package activities

import (
	"context"
	"strings"
	"testing"

	"github.com/linefactory/linefactory/manifests"
	"github.com/linefactory/linefactory/manifests/run"
	"github.com/linefactory/linefactory/store"
)

// A stage visit's job run gets the params checks of a job run's start
// (README, Limits): a param over what a step's environment takes, or params
// times the job's steps over the history budget, fail the visit's params
// (the line run then fails stage_params_invalid) instead of starting a job
// run whose every step fails, or whose workflow Temporal terminates.
func TestCreateStageRunParamsLimits(t *testing.T) {
	ctx := context.Background()
	specs := map[string]manifests.JobParamSpec{"blob": {Type: "string"}}
	for name, c := range map[string]struct {
		blob  int
		steps int
		want  string
	}{
		"fits":         {blob: 100 << 10, steps: 10},
		"one param":    {blob: 140_000, steps: 1, want: "SVC_PARAM_BLOB"},
		"steps × size": {blob: 100 << 10, steps: 400, want: "times the number of steps"},
	} {
		st := &lineStore{jobs: map[string]store.JobRun{}, lines: map[string]store.LineRun{"lr_1": {ID: "lr_1", Status: run.Running}}}
		a := &Activities{Store: st}
		res, err := a.CreateStageRun(ctx, CreateStageRunInput{JobRunID: "jr_1", LineRunID: "lr_1", Stage: "s", Steps: c.steps, ParamSpecs: specs,
			Params: map[string]any{"blob": strings.Repeat("x", c.blob)}, Iteration: 1, Order: 1})
		if err != nil {
			t.Fatal(err)
		}
		_, made := st.jobs["jr_1"]
		if c.want == "" && (res.Problems != "" || !made) || c.want != "" && (!strings.Contains(res.Problems, c.want) || made) {
			t.Errorf("%s: problems %q, job run made %v; want problems naming %q", name, res.Problems, made, c.want)
		}
	}
}
