package activities

import (
	"context"

	"github.com/linefactory/linefactory/store"
)

// stepPatcher is a store that records a step's start and end as a small
// write of its timeline entry (store.Store does); other stores get the
// whole-run UpdateJobRun. MarkJobRunStep is the write a database crash may
// lose without harm (a step's start), which need not wait for the disk.
type stepPatcher interface {
	UpdateJobRunStep(ctx context.Context, runID, task, step string, change func(*store.StepTimelineEntry)) error
	MarkJobRunStep(ctx context.Context, runID, task, step string, change func(*store.StepTimelineEntry)) error
}
