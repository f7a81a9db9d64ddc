package run

import (
	"slices"
	"strings"
	"testing"
)

func TestTerminal(t *testing.T) {
	cases := []struct {
		kind     Kind
		terminal []Status
		open     []Status
	}{
		{JobRun, []Status{Succeeded, Failed, Cancelled, TimedOut}, []Status{Queued, Running}},
		{Step, []Status{Succeeded, Failed, Cancelled, TimedOut, Skipped}, []Status{Pending, Running}},
		{LineRun, []Status{Succeeded, Failed, Cancelled}, []Status{Queued, Running, Waiting}},
		{StageVisit, []Status{Succeeded, Failed, Cancelled}, []Status{Running}},
	}
	for _, tc := range cases {
		for _, s := range tc.terminal {
			if !tc.kind.Terminal(s) || !tc.kind.Valid(s) {
				t.Errorf("kind %d: %s terminal=%v valid=%v, want both", tc.kind, s, tc.kind.Terminal(s), tc.kind.Valid(s))
			}
		}
		for _, s := range tc.open {
			if tc.kind.Terminal(s) || !tc.kind.Valid(s) {
				t.Errorf("kind %d: %s terminal=%v valid=%v, want open and valid", tc.kind, s, tc.kind.Terminal(s), tc.kind.Valid(s))
			}
		}
		if got, want := len(tc.kind.Statuses()), len(tc.terminal)+len(tc.open); got != want {
			t.Errorf("kind %d: %d statuses %v, want %d", tc.kind, got, tc.kind.Statuses(), want)
		}
		if got := tc.kind.Statuses()[0]; got != tc.open[0] || tc.kind.Initial() != tc.open[0] {
			t.Errorf("kind %d: initial %s, want %s", tc.kind, got, tc.open[0])
		}
	}
	if JobRun.Valid(Waiting) || StageVisit.Valid(Queued) || Step.Valid(Queued) {
		t.Error("a status of another kind is valid")
	}
}

func TestCanMove(t *testing.T) {
	cases := []struct {
		kind     Kind
		from, to Status
		want     bool
	}{
		{JobRun, Queued, Running, true},
		{JobRun, Running, TimedOut, true},
		{JobRun, Succeeded, Failed, false},
		{JobRun, Running, Queued, false},
		{LineRun, Running, Waiting, true},
		{LineRun, Waiting, Running, true},
		{LineRun, Cancelled, Running, false},
		{Step, Pending, Skipped, true},
		{StageVisit, Running, Succeeded, true},
		{StageVisit, Succeeded, Running, false},
	}
	for _, tc := range cases {
		if got := tc.kind.CanMove(tc.from, tc.to); got != tc.want {
			t.Errorf("kind %d %s -> %s = %v, want %v", tc.kind, tc.from, tc.to, got, tc.want)
		}
	}
	for _, k := range []Kind{JobRun, Step, LineRun, StageVisit} {
		for _, s := range k.TerminalStatuses() {
			for _, to := range k.Statuses() {
				if k.CanMove(s, to) {
					t.Errorf("kind %d: terminal %s moves to %s", k, s, to)
				}
			}
		}
	}
}

func TestFailureDomain(t *testing.T) {
	cases := []struct {
		code  FailureCode
		class FailureClass
		want  Domain
	}{
		{NoRoute, "", DomainConfig},
		{BudgetExceeded, "", DomainConfig},
		{LineTimeout, "", DomainConfig},
		{JobOutputsInvalid, "", DomainContract},
		{DispatchFailed, "", DomainPlatform},
		{UserCancelled, "", DomainUser},
		{AmbiguousAgenticTransition, "", DomainAgent},
		{StageFailed, ClassInfra, DomainInfra},
		{StageFailed, "weird", DomainUnknown},
		{StageFailed, "", DomainUnknown},
		{UnknownFailure, "", DomainUnknown},
	}
	for _, tc := range cases {
		if got := FailureDomain(tc.code, tc.class); got != tc.want {
			t.Errorf("FailureDomain(%s, %q) = %s, want %s", tc.code, tc.class, got, tc.want)
		}
	}
	// Every code but unknown and stage_failed has a domain of its own.
	for _, c := range []FailureCode{ManifestNoStages, ManifestTriggerInvalid, UnknownStage, NoRoute, AmbiguousTransition,
		AmbiguousAgenticTransition, TransitionParamsInvalid, MaxIterationsExhausted, JobResultInvalid, JobOutputsInvalid,
		StageParamsInvalid, LineStateInvalid, DispatchFailed, ControlPayloadInvalid, ControlTargetInvalid, ControlMissingID,
		ControlWaitExpired, ControlWaitUnknownSelection, ControlStopNotApplied, RetrySnapshotInvalid, RoutingWaitExpired,
		UserCancelled, BudgetExceeded, LineTimeout} {
		if d := FailureDomain(c, ""); d == DomainUnknown {
			t.Errorf("code %s has no domain", c)
		}
	}
	if f := NewFailure(DispatchFailed, "x"); f.Domain != DomainPlatform || f.ErrorMessage != "x" {
		t.Errorf("NewFailure = %+v", f)
	}
}

func TestIDs(t *testing.T) {
	a, b := NewJobRunID(), NewJobRunID()
	if a == b || !strings.HasPrefix(a, "jr_") || len(a) != 3+32 {
		t.Fatalf("job run ids %q, %q", a, b)
	}
	if ids := []string{a, b}; !slices.IsSorted(ids) {
		t.Errorf("ids not time-sorted: %v", ids)
	}
	if !strings.HasPrefix(NewLineRunID(), "lr_") {
		t.Error("line run id prefix")
	}
	for got, want := range map[string]string{
		JobRunWorkflowID("jr_1"): "jobrun/jr_1", LineRunWorkflowID("lr_1"): "linerun/lr_1",
		LineScheduleID("l"): "lineschedule/l", JobScheduleID("j"): "jobschedule/j",
	} {
		if got != want {
			t.Errorf("id %q, want %q", got, want)
		}
	}
}
