package activities

import (
	"context"
	"encoding/json"
	"time"

	"github.com/linefactory/linefactory/manifests/run"
	"github.com/linefactory/linefactory/store"
)

// LineWritesInput is writes of a line run's record made together: one local
// activity and one update of the record instead of one of each per write (a
// line manager makes them between two stages). They apply in this order: a
// stage visit ended (Stage, as RecordStage), the transition taken after it
// (Transition, as RecordTransition), the next manager turn begun (Turn, as
// RecordTurn), the job run of its visit made (Create, as CreateStageRun),
// the run ended (Finish, as FinishLineRun). Nil parts are not written.
type LineWritesInput struct {
	RunID      string
	Stage      *StageVisit            `json:",omitempty"`
	Transition *RecordTransitionInput `json:",omitempty"`
	Turn       *RecordTurnInput       `json:",omitempty"`
	Create     *CreateStageRunInput   `json:",omitempty"`
	Finish     *FinishLineRunInput    `json:",omitempty"`
}

// LineWritesResult is what each part written returns; nil for the parts
// not asked for. When Turn finds the run ended (a replayed turn: its Status
// is final), Create and Finish were not written and are nil.
type LineWritesResult struct {
	Stage  *RecordStageResult    `json:",omitempty"`
	Turn   *RecordTurnResult     `json:",omitempty"`
	Create *CreateStageRunResult `json:",omitempty"`
	Finish *FinishLineRunResult  `json:",omitempty"`
}

// LineWrites makes in's writes: what they read or write beside the line
// run (the ended visit's job run, the new visit's job run, the failing job
// run) first, then the line run in one read-modify-write, then the job runs
// the run ends with. Each part is idempotent as its own activity is, so a
// retried LineWrites writes nothing twice.
func (a *Activities) LineWrites(ctx context.Context, in LineWritesInput) (LineWritesResult, error) {
	w := &lineWrite{in: in}
	if err := w.prepare(ctx, a); err != nil {
		return LineWritesResult{}, err
	}
	if w.ended == nil && in.Transition == nil && in.Turn == nil && !w.created && in.Finish == nil {
		return LineWritesResult{Create: w.create}, nil // params that do not hold: nothing to write
	}
	w.now = a.now()
	r, err := a.Store.UpdateLineRun(ctx, in.RunID, func(r *store.LineRun) error {
		w.apply(r)
		return nil
	})
	if err != nil {
		return LineWritesResult{}, err
	}
	if w.created && w.over {
		w.open = append(w.open, in.Create.JobRunID) // made for a turn that does not go on
	}
	if err := a.cancelUnstarted(ctx, w.open, w.now); err != nil {
		return LineWritesResult{}, err
	}
	return w.result(r)
}

// lineWrite is one LineWrites: its input and what it learns on the way.
type lineWrite struct {
	in      LineWritesInput
	ended   *endedVisit           // the ended visit's entry
	create  *CreateStageRunResult // the new visit's job run
	created bool                  // made (its params hold)
	failing *store.JobRun         // the job run the run's failure names
	now     time.Time
	// Set by apply: the job runs of visits the run ends with, the status
	// as the turn began, whether the run had ended then.
	open       []string
	turnStatus run.Status
	over       bool
}

// prepare reads and writes what the parts need beside the line run.
func (w *lineWrite) prepare(ctx context.Context, a *Activities) error {
	if w.in.Stage != nil {
		e, err := a.endVisit(ctx, *w.in.Stage)
		if err != nil {
			return err
		}
		w.ended = &e
	}
	if w.in.Create != nil {
		c, err := a.createStageRun(ctx, *w.in.Create)
		if err != nil {
			return err
		}
		w.create, w.created = &c, c.Problems == ""
	}
	if w.in.Finish != nil {
		w.failing = a.failingJobRun(ctx, w.in.Finish.Failure)
	}
	return nil
}

// apply changes the line run record r as the parts say, in their order.
func (w *lineWrite) apply(r *store.LineRun) {
	in := w.in
	w.open, w.over = nil, false
	if w.ended != nil {
		w.ended.apply(r)
	}
	if in.Transition != nil {
		applyTransition(r, *in.Transition)
	}
	if in.Turn != nil {
		applyTurn(r, *in.Turn)
		w.turnStatus, w.over = r.Status, run.LineRun.Terminal(r.Status)
	}
	if w.created && !w.over {
		applyCreate(r, *in.Create)
	}
	if in.Finish != nil && !w.over {
		w.open = applyFinish(r, *in.Finish, w.failing, w.now)
	}
}

// result is what each part returns, from the record as written.
func (w *lineWrite) result(r store.LineRun) (LineWritesResult, error) {
	in, res := w.in, LineWritesResult{}
	var err error
	if w.ended != nil {
		res.Stage = &RecordStageResult{TotalCostCents: r.TotalCostCents}
		if res.Stage.Visit, err = json.Marshal(findVisit(r, w.ended.visit.JobRunID)); err != nil {
			return LineWritesResult{}, err
		}
	}
	if in.Turn != nil {
		res.Turn = &RecordTurnResult{Status: w.turnStatus}
		if res.Turn.Record, err = turnHead(r); err != nil {
			return LineWritesResult{}, err
		}
	}
	if w.create != nil && !w.over {
		res.Create = w.create
		if w.created {
			if res.Create.Visit, err = json.Marshal(findVisit(r, in.Create.JobRunID)); err != nil {
				return LineWritesResult{}, err
			}
		}
	}
	if in.Finish != nil && !w.over {
		fin := FinishLineRunResult{Status: r.Status}
		if r.Failure != nil {
			f := r.Failure.Failure()
			fin.Failure = &f
		}
		if fin.Record, err = json.Marshal(r); err != nil {
			return LineWritesResult{}, err
		}
		res.Finish = &fin
	}
	return res, nil
}
