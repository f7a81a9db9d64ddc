package cpuclock

import "testing"

// Work done by this process shows in Ms.
func TestMsCountsThisProcess(t *testing.T) {
	before := Ms()
	x := 0
	for i := 0; Ms()-before < 5 && i < 1e10; i++ {
		x += i
	}
	if got := Ms() - before; got < 5 {
		t.Fatalf("Ms moved %.2f ms while this process computed (%d)", got, x)
	}
}
