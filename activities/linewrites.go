package activities

import (
	"context"
	"encoding/json"

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
	var res LineWritesResult
	var ended *endedVisit
	if in.Stage != nil {
		e, err := a.endVisit(ctx, *in.Stage)
		if err != nil {
			return res, err
		}
		ended = &e
	}
	created := false
	if in.Create != nil {
		c, err := a.createStageRun(ctx, *in.Create)
		if err != nil {
			return res, err
		}
		res.Create, created = &c, c.Problems == ""
	}
	var failing *store.JobRun
	if in.Finish != nil {
		failing = a.failingJobRun(ctx, in.Finish.Failure)
	}
	if ended == nil && in.Transition == nil && in.Turn == nil && !created && in.Finish == nil {
		return res, nil // params that do not hold: nothing to write
	}
	now := a.now()
	var open []string // job runs of visits the run ends with
	var turnStatus run.Status
	over := false // the run had ended when the turn began
	r, err := a.Store.UpdateLineRun(ctx, in.RunID, func(r *store.LineRun) error {
		open, over = nil, false
		if ended != nil {
			ended.apply(r)
		}
		if in.Transition != nil {
			applyTransition(r, *in.Transition)
		}
		if in.Turn != nil {
			applyTurn(r, *in.Turn)
			turnStatus, over = r.Status, run.LineRun.Terminal(r.Status)
		}
		if created && !over {
			applyCreate(r, *in.Create)
		}
		if in.Finish != nil && !over {
			open = applyFinish(r, *in.Finish, failing, now)
		}
		return nil
	})
	if err != nil {
		return LineWritesResult{}, err
	}
	if created && over {
		open = append(open, in.Create.JobRunID) // made for a turn that does not go on
	}
	if err := a.cancelUnstarted(ctx, open, now); err != nil {
		return LineWritesResult{}, err
	}
	if ended != nil {
		visit, err := json.Marshal(findVisit(r, ended.visit.JobRunID))
		if err != nil {
			return LineWritesResult{}, err
		}
		res.Stage = &RecordStageResult{Visit: visit, TotalCostCents: r.TotalCostCents}
	}
	if in.Turn != nil {
		head, err := turnHead(r)
		if err != nil {
			return LineWritesResult{}, err
		}
		res.Turn = &RecordTurnResult{Status: turnStatus, Record: head}
	}
	if created && !over {
		if res.Create.Visit, err = json.Marshal(findVisit(r, in.Create.JobRunID)); err != nil {
			return LineWritesResult{}, err
		}
	} else if over {
		res.Create = nil
	}
	if in.Finish != nil && !over {
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
