package workflows

import (
	"sync/atomic"
	"testing"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/workflow"

	"github.com/linefactory/linefactory/manifests/manifesttest"
	"github.com/linefactory/linefactory/manifests/run"
)

// countingConverter counts the bytes of every payload it encodes: the
// inputs and results of activities, local activities, child workflows and
// continue-as-new, which is what a run's history holds.
type countingConverter struct {
	converter.DataConverter
	bytes  atomic.Int64
	paused atomic.Bool
}

func (c *countingConverter) ToPayload(v any) (*commonpb.Payload, error) {
	p, err := c.DataConverter.ToPayload(v)
	if p != nil && !c.paused.Load() {
		c.bytes.Add(int64(len(p.Data)))
	}
	return p, err
}

func (c *countingConverter) ToPayloads(vs ...any) (*commonpb.Payloads, error) {
	ps, err := c.DataConverter.ToPayloads(vs...)
	if ps != nil && !c.paused.Load() {
		for _, p := range ps.Payloads {
			c.bytes.Add(int64(len(p.Data)))
		}
	}
	return ps, err
}

// loopHistoryBytes runs a line that visits one stage visits times and
// returns the payload bytes the manager's turns put into their histories.
func loopHistoryBytes(t *testing.T, visits int) int64 {
	t.Helper()
	f := newFixture(t)
	in := lineInput(t, manifesttest.Line("self-loop", map[string]any{"visits": visits}), nil)
	conv := &countingConverter{DataConverter: converter.GetDefaultDataConverter()}
	child := func(workflow.Context, JobRunInput) (JobRunResult, error) {
		return JobRunResult{Outcome: run.Outcome{Status: run.Succeeded}}, nil
	}
	res, rec := f.runLineWith(t, in, lineOpts{child: child, conv: conv})
	if len(rec.Stages) != visits {
		t.Fatalf("%d visits (%s %+v), want %d", len(rec.Stages), res.Status, res.Failure, visits)
	}
	return conv.bytes.Load()
}

// TestLineHistoryPerTurnIsConstant: a manager turn's history does not grow
// with the visits before it, so a loop's history is linear in its visits.
func TestLineHistoryPerTurnIsConstant(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 60 manager turns")
	}
	small, large := loopHistoryBytes(t, 10), loopHistoryBytes(t, 50)
	t.Logf("payload bytes: 10 visits %d, 50 visits %d (%.1f per visit)", small, large, float64(large)/50)
	if ratio := float64(large) / float64(small); ratio > 7 {
		t.Fatalf("50 visits put %d bytes into history, 10 visits %d: ratio %.1f, want about 5 (linear)", large, small, ratio)
	}
}
