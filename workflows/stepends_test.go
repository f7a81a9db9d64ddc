package workflows

import (
	"fmt"
	"testing"

	"github.com/linefactory/linefactory/activities"
)

func endOf(task string, i int) activities.StepEnd {
	return activities.StepEnd{Task: task, Step: fmt.Sprintf("s%d", i)}
}

func stepsOf(ends []activities.StepEnd) string {
	out := ""
	for _, e := range ends {
		out += e.Task + "/" + e.Step + " "
	}
	return out
}

// TestStepEnds: a step's write carries the ends no write has carried; once
// written lazily they stay until a durable write, a step's every
// maxLazyEnds ends, which carries them again; FinishRun's carries all.
func TestStepEnds(t *testing.T) {
	var e stepEnds
	ends, durable := e.take()
	if len(ends) != 0 || durable {
		t.Fatalf("first step carries %v durable %v", ends, durable)
	}
	own := endOf("t", 0)
	e.written(ends, durable, &own)
	for i := 1; i <= maxLazyEnds; i++ {
		ends, durable = e.take()
		if durable || stepsOf(ends) != stepsOf([]activities.StepEnd{endOf("t", i-1)}) {
			t.Fatalf("step %d carries %s durable %v", i, stepsOf(ends), durable)
		}
		own := endOf("t", i)
		e.written(ends, durable, &own)
	}
	if len(e.lazy) != maxLazyEnds || len(e.pending) != 1 {
		t.Fatalf("%d lazy, %d pending", len(e.lazy), len(e.pending))
	}
	// A step of another task carried the same pending end meanwhile.
	e.written([]activities.StepEnd{endOf("t", maxLazyEnds)}, false, nil)
	e.written([]activities.StepEnd{endOf("t", maxLazyEnds)}, false, nil)
	if len(e.lazy) != maxLazyEnds+1 || len(e.pending) != 0 {
		t.Fatalf("twice carried: %d lazy, %d pending", len(e.lazy), len(e.pending))
	}
	ends, durable = e.take()
	if !durable || len(ends) != maxLazyEnds+1 {
		t.Fatalf("with %d lazy ends a step carries %d, durable %v", maxLazyEnds+1, len(ends), durable)
	}
	// An end left meanwhile by another task's step stays pending.
	other := endOf("u", 0)
	e.written(nil, false, &other)
	e.written(ends, true, nil)
	if len(e.lazy) != 0 || stepsOf(e.all()) != "u/s0 " {
		t.Fatalf("after a durable write: lazy %s, all %s", stepsOf(e.lazy), stepsOf(e.all()))
	}
}
