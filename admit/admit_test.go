package admit

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/serviceerror"

	"github.com/linefactory/linefactory/manifests/run"
	"github.com/linefactory/linefactory/store"
	"github.com/linefactory/linefactory/store/storetest"
)

// starter is a fake engine: it counts the starts it is asked for and
// answers each with err.
type starter struct {
	calls int
	err   error
}

func (s *starter) start(context.Context) error {
	s.calls++
	return s.err
}

// refusingStore refuses to make records.
type refusingStore struct{ *store.Store }

var errStoreDown = errors.New("store down")

func (refusingStore) CreateJobRun(context.Context, store.JobRun) (store.JobRun, error) {
	return store.JobRun{}, errStoreDown
}

func (refusingStore) CreateLineRun(context.Context, store.LineRun) (store.LineRun, error) {
	return store.LineRun{}, errStoreDown
}

var fixedNow = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func newAdmitter(t *testing.T) (Admitter, *store.Store) {
	st := storetest.SQLite(t)
	return Admitter{Store: st, Now: func() time.Time { return fixedNow }}, st
}

func queuedJobRun() store.JobRun {
	id := run.NewJobRunID()
	return store.JobRun{ID: id, JobName: "hello", JobVersionID: "jv_1", Status: run.Queued, WorkflowID: run.JobRunWorkflowID(id)}
}

func queuedLineRun() store.LineRun {
	id := run.NewLineRunID()
	return store.LineRun{ID: id, LineName: "l", Status: run.Queued, WorkflowID: run.LineRunWorkflowID(id)}
}

func TestJobRunAdmission(t *testing.T) {
	ctx := context.Background()
	t.Run("recorded queued, then started", func(t *testing.T) {
		a, st := newAdmitter(t)
		eng := &starter{}
		got, err := a.JobRun(ctx, queuedJobRun(), eng.start)
		stored, gerr := st.GetJobRun(ctx, got.ID)
		if err != nil || gerr != nil || eng.calls != 1 || got.Status != run.Queued || stored.Status != run.Queued || stored.CompletedAt != nil {
			t.Fatalf("admit: %v %v, %d starts, returned %q, stored %+v", err, gerr, eng.calls, got.Status, stored)
		}
	})
	t.Run("engine refuses: recorded failed", func(t *testing.T) {
		a, st := newAdmitter(t)
		eng := &starter{err: errors.New("engine says no")}
		got, err := a.JobRun(ctx, queuedJobRun(), eng.start)
		if !errors.Is(err, ErrNotDispatched) || !strings.Contains(err.Error(), "engine says no") {
			t.Fatalf("error %v, want ErrNotDispatched with the engine's error", err)
		}
		stored, gerr := st.GetJobRun(ctx, got.ID)
		for name, r := range map[string]store.JobRun{"returned": got, "stored": stored} {
			if gerr != nil || r.Status != run.Failed || r.CompletedAt == nil || !r.CompletedAt.Equal(fixedNow) ||
				deref(r.ErrorCode) != run.CodeDispatchFailed || deref(r.FailureClass) != string(run.ClassPlatform) ||
				deref(r.ErrorMessage) != "the run could not be dispatched: engine says no" {
				t.Errorf("%s run %+v (%v)", name, r, gerr)
			}
		}
	})
	t.Run("already started is no failure", func(t *testing.T) {
		a, st := newAdmitter(t)
		eng := &starter{err: serviceerror.NewWorkflowExecutionAlreadyStarted("started", "", "")}
		got, err := a.JobRun(ctx, queuedJobRun(), eng.start)
		stored, _ := st.GetJobRun(ctx, got.ID)
		if err != nil || got.Status != run.Queued || stored.Status != run.Queued {
			t.Fatalf("already started: %v, returned %q stored %q", err, got.Status, stored.Status)
		}
	})
	t.Run("store refuses: nothing started", func(t *testing.T) {
		a, _ := newAdmitter(t)
		a.Store = refusingStore{a.Store.(*store.Store)}
		eng := &starter{}
		if _, err := a.JobRun(ctx, queuedJobRun(), eng.start); !errors.Is(err, errStoreDown) || eng.calls != 0 {
			t.Fatalf("store down: %v, %d starts", err, eng.calls)
		}
	})
	t.Run("admitted again: one record, started while queued", func(t *testing.T) {
		a, st := newAdmitter(t)
		rec := queuedJobRun()
		eng := &starter{}
		if _, err := a.JobRun(ctx, rec, eng.start); err != nil {
			t.Fatal(err)
		}
		if _, err := a.JobRun(ctx, rec, eng.start); err != nil || eng.calls != 2 {
			t.Fatalf("again while queued: %v, %d starts", err, eng.calls)
		}
		if _, err := st.UpdateJobRun(ctx, rec.ID, func(r *store.JobRun) error { r.Status = run.Running; return nil }); err != nil {
			t.Fatal(err)
		}
		got, err := a.JobRun(ctx, rec, eng.start)
		if err != nil || eng.calls != 2 || got.Status != run.Running {
			t.Fatalf("again once running: %v, %d starts, %q", err, eng.calls, got.Status)
		}
	})
	t.Run("a refusal never ends a run that left queued", func(t *testing.T) {
		a, st := newAdmitter(t)
		rec := queuedJobRun()
		rec.Status = run.Running
		if _, err := st.CreateJobRun(ctx, rec); err != nil {
			t.Fatal(err)
		}
		got, err := a.JobRunNotDispatched(ctx, rec.ID, errors.New("late"))
		if err != nil || got.Status != run.Running || got.ErrorCode != nil {
			t.Fatalf("refusal of a running run: %v %+v", err, got)
		}
	})
}

func TestLineRunAdmission(t *testing.T) {
	ctx := context.Background()
	t.Run("recorded queued, then started", func(t *testing.T) {
		a, st := newAdmitter(t)
		eng := &starter{}
		got, err := a.LineRun(ctx, queuedLineRun(), eng.start)
		stored, gerr := st.GetLineRun(ctx, got.ID)
		if err != nil || gerr != nil || eng.calls != 1 || got.Status != run.Queued || stored.Status != run.Queued || stored.Failure != nil {
			t.Fatalf("admit: %v %v, %d starts, returned %q, stored %+v", err, gerr, eng.calls, got.Status, stored)
		}
	})
	t.Run("engine refuses: recorded failed dispatch_failed", func(t *testing.T) {
		a, st := newAdmitter(t)
		eng := &starter{err: errors.New("engine says no")}
		got, err := a.LineRun(ctx, queuedLineRun(), eng.start)
		if !errors.Is(err, ErrNotDispatched) {
			t.Fatalf("error %v, want ErrNotDispatched", err)
		}
		stored, gerr := st.GetLineRun(ctx, got.ID)
		const msg = "the line run could not be dispatched: engine says no"
		for name, r := range map[string]store.LineRun{"returned": got, "stored": stored} {
			if gerr != nil || r.Status != run.Failed || r.CompletedAt == nil || deref(r.ErrorMessage) != msg || r.Failure == nil ||
				*r.Failure.Code != run.DispatchFailed || r.Failure.Domain != run.DomainPlatform || deref(r.Failure.ErrorMessage) != msg {
				t.Errorf("%s run %+v failure %+v (%v)", name, r, r.Failure, gerr)
			}
		}
	})
	t.Run("already started is no failure", func(t *testing.T) {
		a, _ := newAdmitter(t)
		eng := &starter{err: serviceerror.NewWorkflowExecutionAlreadyStarted("started", "", "")}
		if got, err := a.LineRun(ctx, queuedLineRun(), eng.start); err != nil || got.Status != run.Queued {
			t.Fatalf("already started: %v %q", err, got.Status)
		}
	})
	t.Run("store refuses: nothing started", func(t *testing.T) {
		a, _ := newAdmitter(t)
		a.Store = refusingStore{a.Store.(*store.Store)}
		eng := &starter{}
		if _, err := a.LineRun(ctx, queuedLineRun(), eng.start); !errors.Is(err, errStoreDown) || eng.calls != 0 {
			t.Fatalf("store down: %v, %d starts", err, eng.calls)
		}
	})
	t.Run("another run of the delivery: conflict, nothing started", func(t *testing.T) {
		a, _ := newAdmitter(t)
		delivery := "dlv_1"
		first, second := queuedLineRun(), queuedLineRun()
		for _, r := range []*store.LineRun{&first, &second} {
			r.Trigger = store.TriggerSummary{Source: "webhook", DeliveryID: &delivery, Payload: map[string]any{}}
		}
		eng := &starter{}
		if _, err := a.LineRun(ctx, first, eng.start); err != nil {
			t.Fatal(err)
		}
		if _, err := a.LineRun(ctx, second, eng.start); !errors.Is(err, store.ErrConflict) || eng.calls != 1 {
			t.Fatalf("second run of the delivery: %v, %d starts", err, eng.calls)
		}
	})
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
