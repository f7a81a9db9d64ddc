package run

import "slices"

// Status is the status of a job run, step, line run or stage visit, equal to
// its wire value (API.md "Statuses").
type Status string

// Statuses.
const (
	Queued    Status = "queued"
	Pending   Status = "pending"
	Running   Status = "running"
	Waiting   Status = "waiting"
	Succeeded Status = "succeeded"
	Failed    Status = "failed"
	Cancelled Status = "cancelled"
	TimedOut  Status = "timed_out"
	Skipped   Status = "skipped"
)

// Kind is the kind of thing a status belongs to: each kind has its own
// statuses, terminal set and transitions.
type Kind int

// Kinds of status holders.
const (
	JobRun Kind = iota
	Step
	LineRun
	StageVisit
)

type lifecycle struct {
	initial  Status
	terminal []Status
	moves    map[Status][]Status
}

var lifecycles = map[Kind]lifecycle{
	// job run: queued → running → succeeded | failed | cancelled | timed_out;
	// a run can also end before it starts (dispatch failure, stop).
	JobRun: {initial: Queued, terminal: []Status{Succeeded, Failed, Cancelled, TimedOut},
		moves: map[Status][]Status{
			Queued:  {Running, Succeeded, Failed, Cancelled, TimedOut},
			Running: {Succeeded, Failed, Cancelled, TimedOut},
		}},
	// step: pending → running → succeeded | failed | cancelled | timed_out | skipped;
	// a step that never ran ends straight from pending.
	Step: {initial: Pending, terminal: []Status{Succeeded, Failed, Cancelled, TimedOut, Skipped},
		moves: map[Status][]Status{
			Pending: {Running, Succeeded, Failed, Cancelled, TimedOut, Skipped},
			Running: {Succeeded, Failed, Cancelled, TimedOut, Skipped},
		}},
	// line run: queued → running ⇄ waiting → succeeded | failed | cancelled.
	LineRun: {initial: Queued, terminal: []Status{Succeeded, Failed, Cancelled},
		moves: map[Status][]Status{
			Queued:  {Running, Succeeded, Failed, Cancelled},
			Running: {Waiting, Succeeded, Failed, Cancelled},
			Waiting: {Running, Succeeded, Failed, Cancelled},
		}},
	// stage visit: running → succeeded | failed | cancelled.
	StageVisit: {initial: Running, terminal: []Status{Succeeded, Failed, Cancelled},
		moves: map[Status][]Status{
			Running: {Succeeded, Failed, Cancelled},
		}},
}

// Initial is the status a new k starts with.
func (k Kind) Initial() Status { return lifecycles[k].initial }

// Terminal says whether s ends a k: nothing changes it after that.
func (k Kind) Terminal(s Status) bool { return slices.Contains(lifecycles[k].terminal, s) }

// TerminalStatuses lists the statuses that end a k.
func (k Kind) TerminalStatuses() []Status { return slices.Clone(lifecycles[k].terminal) }

// Statuses lists every status of a k, the initial one first.
func (k Kind) Statuses() []Status {
	l := lifecycles[k]
	out := []Status{l.initial}
	for _, s := range []Status{Pending, Queued, Running, Waiting} {
		if s != l.initial && len(l.moves[s]) > 0 {
			out = append(out, s)
		}
	}
	return append(out, l.terminal...)
}

// Valid says whether s is a status of a k.
func (k Kind) Valid(s Status) bool { return slices.Contains(k.Statuses(), s) }

// CanMove says whether a k may go from status from to status to.
func (k Kind) CanMove(from, to Status) bool { return slices.Contains(lifecycles[k].moves[from], to) }
