package testwait

import (
	"testing"
	"time"
)

func TestUntil(t *testing.T) {
	n := 0
	if !Until(time.Second, func() bool { n++; return n == 3 }) || n != 3 {
		t.Fatalf("true on the third check: %d checks", n)
	}
	start := time.Now()
	if UntilEvery(100*time.Millisecond, 10*time.Millisecond, func() bool { return false }) {
		t.Fatal("a condition that never holds held")
	}
	if d := time.Since(start); d < 100*time.Millisecond || d > 2*time.Second {
		t.Fatalf("gave up after %v, want about 100ms", d)
	}
}
