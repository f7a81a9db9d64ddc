package admit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/linefactory/linefactory/manifests/run"
	"github.com/linefactory/linefactory/store"
)

// Start starts the workflow of the run being admitted, under the workflow id
// its record names. An error is the engine's refusal; a workflow of that id
// that is already started (WorkflowExecutionAlreadyStarted) is not one.
type Start func(ctx context.Context) error

// Store is what admission needs of the store (*store.Store satisfies it).
type Store interface {
	CreateJobRun(ctx context.Context, r store.JobRun) (store.JobRun, error)
	GetJobRun(ctx context.Context, id string) (store.JobRun, error)
	UpdateJobRun(ctx context.Context, id string, change func(*store.JobRun) error) (store.JobRun, error)
	CreateLineRun(ctx context.Context, r store.LineRun) (store.LineRun, error)
	GetLineRun(ctx context.Context, id string) (store.LineRun, error)
	UpdateLineRun(ctx context.Context, id string, change func(*store.LineRun) error) (store.LineRun, error)
}

// ErrNotDispatched is the error of an admission whose workflow the engine
// did not take (it wraps the engine's error). The record returned with it is
// the run as stored: failed when the failure was recorded.
var ErrNotDispatched = errors.New("the workflow engine did not accept the run")

// Admitter admits runs into Store; Now is its clock (default time.Now).
type Admitter struct {
	Store Store
	Now   func() time.Time
}

func (a Admitter) now() time.Time {
	if a.Now == nil {
		return time.Now().UTC()
	}
	return a.Now().UTC()
}

// JobRun admits the job run rec (status queued, workflow id
// run.JobRunWorkflowID(rec.ID)) and starts its workflow with start. It
// returns the run as stored; see ErrNotDispatched.
func (a Admitter) JobRun(ctx context.Context, rec store.JobRun, start Start) (store.JobRun, error) {
	return admitRun(ctx, records[store.JobRun]{
		create:        a.Store.CreateJobRun,
		get:           a.Store.GetJobRun,
		queued:        func(r store.JobRun) bool { return r.Status == run.Queued },
		notDispatched: a.JobRunNotDispatched,
	}, rec.ID, rec, start)
}

// LineRun admits the line run rec (status queued, workflow id
// run.LineRunWorkflowID(rec.ID)) and starts its manager with start. It
// returns the run as stored; see ErrNotDispatched.
func (a Admitter) LineRun(ctx context.Context, rec store.LineRun, start Start) (store.LineRun, error) {
	return admitRun(ctx, records[store.LineRun]{
		create:        a.Store.CreateLineRun,
		get:           a.Store.GetLineRun,
		queued:        func(r store.LineRun) bool { return r.Status == run.Queued },
		notDispatched: a.LineRunNotDispatched,
	}, rec.ID, rec, start)
}

// JobRunNotDispatched records that the engine refused the workflow of job
// run id (cause): a run still queued ends failed DISPATCH_FAILED, class
// platform. A run that has left queued is not changed.
func (a Admitter) JobRunNotDispatched(ctx context.Context, id string, cause error) (store.JobRun, error) {
	now := a.now()
	return a.Store.UpdateJobRun(ctx, id, func(r *store.JobRun) error {
		if r.Status != run.Queued {
			return nil
		}
		r.CompletedAt = &now
		r.SetOutcome(run.Fail(run.CodeDispatchFailed, run.ClassPlatform, "the run could not be dispatched: "+cause.Error()))
		return nil
	})
}

// LineRunNotDispatched records that the engine refused the manager of line
// run id (cause): a run still queued ends failed dispatch_failed (domain
// platform). A run that has left queued is not changed.
func (a Admitter) LineRunNotDispatched(ctx context.Context, id string, cause error) (store.LineRun, error) {
	now := a.now()
	f := run.NewFailure(run.DispatchFailed, "the line run could not be dispatched: "+cause.Error())
	return a.Store.UpdateLineRun(ctx, id, func(r *store.LineRun) error {
		if r.Status != run.Queued {
			return nil
		}
		r.Status, r.CompletedAt, r.ErrorMessage = run.Failed, &now, &f.ErrorMessage
		r.Failure = store.NewLineRunFailure(*f)
		return nil
	})
}

// records is how admission reads and writes the records of one kind of run.
type records[R any] struct {
	create        func(context.Context, R) (R, error)
	get           func(context.Context, string) (R, error)
	queued        func(R) bool
	notDispatched func(context.Context, string, error) (R, error)
}

// admitRun is the admission of every kind of run: record, start, and record
// the engine's refusal.
func admitRun[R any](ctx context.Context, rs records[R], id string, rec R, start Start) (R, error) {
	var none R
	got, err := rs.create(ctx, rec)
	if errors.Is(err, store.ErrConflict) {
		// The same record again is this admission retried; any other
		// conflict (a delivery's run of the line) is the caller's.
		prior, gerr := rs.get(ctx, id)
		if gerr != nil {
			return none, err
		}
		if !rs.queued(prior) {
			return prior, nil // started (or failed) by the earlier try
		}
		got, err = prior, nil
	}
	if err != nil {
		return none, err
	}
	serr := start(ctx)
	if serr == nil || temporal.IsWorkflowExecutionAlreadyStartedError(serr) {
		return got, nil
	}
	// The failure is recorded even when the caller has gone.
	failed, ferr := rs.notDispatched(context.WithoutCancel(ctx), id, serr)
	if ferr != nil {
		return got, fmt.Errorf("%w: %w (recording the failure: %w)", ErrNotDispatched, serr, ferr)
	}
	return failed, fmt.Errorf("%w: %w", ErrNotDispatched, serr)
}
