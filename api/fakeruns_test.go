package api

import (
	"context"
	"sync"

	"go.temporal.io/sdk/temporal"

	"github.com/linefactory/linefactory/store"
	"github.com/linefactory/linefactory/workflows"
)

// fakeRuns is the workflow engine of api tests (the real one is exercised
// end to end in cmd/factoryd): it records what the API asks of it. A call
// with an answer (on) is answered first; an error is the engine refusing
// it, and a refused call is not recorded.
type fakeRuns struct {
	mu        sync.Mutex
	started   []workflows.JobRunInput
	lines     []workflows.LineRunInput
	schedules []store.LineSchedule
	deleted   []string // lines whose schedule the engine dropped
	cancelled []string // job and line run ids
	// job schedules handed to the engine, and jobs whose schedule it dropped
	jobSchedules []workflows.JobSchedule
	jobDeleted   []string
	answers      map[string]func(ctx context.Context, arg any) error
}

// on makes the engine answer the calls of method (a Runs method's name)
// with answer, given the call's argument (its input, schedule, run id or
// name); it returns f.
func (f *fakeRuns) on(method string, answer func(ctx context.Context, arg any) error) *fakeRuns {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.answers == nil {
		f.answers = map[string]func(context.Context, any) error{}
	}
	f.answers[method] = answer
	return f
}

// call answers a call of method with arg and records arg in list.
func call[T any](ctx context.Context, f *fakeRuns, method string, list *[]T, arg T) error {
	f.mu.Lock()
	answer := f.answers[method]
	f.mu.Unlock()
	if answer != nil {
		if err := answer(ctx, arg); err != nil {
			return err
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	*list = append(*list, arg)
	return nil
}

// recorded is a copy of one of f's lists, read under its lock.
func recorded[T any](f *fakeRuns, list *[]T) []T {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]T(nil), *list...)
}

func (f *fakeRuns) StartJobRun(ctx context.Context, in workflows.JobRunInput) error {
	return call(ctx, f, "StartJobRun", &f.started, in)
}

func (f *fakeRuns) StartLineRun(ctx context.Context, in workflows.LineRunInput) error {
	return call(ctx, f, "StartLineRun", &f.lines, in)
}

func (f *fakeRuns) CancelJobRun(ctx context.Context, id string) error {
	return call(ctx, f, "CancelJobRun", &f.cancelled, id)
}

func (f *fakeRuns) CancelLineRun(ctx context.Context, id string) error {
	return call(ctx, f, "CancelLineRun", &f.cancelled, id)
}

func (f *fakeRuns) UpsertSchedule(ctx context.Context, sc store.LineSchedule) error {
	return call(ctx, f, "UpsertSchedule", &f.schedules, sc)
}

func (f *fakeRuns) DeleteSchedule(ctx context.Context, line string) error {
	return call(ctx, f, "DeleteSchedule", &f.deleted, line)
}

func (f *fakeRuns) UpsertJobSchedule(ctx context.Context, sc workflows.JobSchedule) error {
	return call(ctx, f, "UpsertJobSchedule", &f.jobSchedules, sc)
}

func (f *fakeRuns) DeleteJobSchedule(ctx context.Context, job string) error {
	return call(ctx, f, "DeleteJobSchedule", &f.jobDeleted, job)
}

// SelectLineRun refuses like the manager's validator of a run that waits
// for nothing.
func (f *fakeRuns) SelectLineRun(_ context.Context, id string, _ workflows.SelectInput) (store.LineRun, error) {
	return store.LineRun{}, temporal.NewNonRetryableApplicationError("line run "+id+" is not waiting for a selection", workflows.CodeControlTargetInvalid, nil)
}
