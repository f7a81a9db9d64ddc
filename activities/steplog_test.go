package activities

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// outageStore is a store whose appends fail while down.
type outageStore struct {
	Store
	mu    sync.Mutex
	down  bool
	fails int
	log   strings.Builder
}

func (s *outageStore) AppendStepLog(_ context.Context, _, _, _ string, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		s.fails++
		return errors.New("connection refused")
	}
	s.log.Write(data)
	return nil
}

func (s *outageStore) setDown(down bool) {
	s.mu.Lock()
	s.down = down
	s.mu.Unlock()
}

func (s *outageStore) text() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log.String()
}

// TestLogSurvivesStoreOutage: output written while the store refuses
// appends is kept and appended once it takes them again; nothing is lost.
func TestLogSurvivesStoreOutage(t *testing.T) {
	st := &outageStore{}
	a := &Activities{Store: st, LogRetry: 50 * time.Millisecond}
	w := a.newLogWriter(context.Background(), "jr_1", "t/s", "stdout")
	retries := testutil.ToFloat64(logAppendRetries)
	failures := testutil.ToFloat64(logAppendFailures)
	var want strings.Builder
	for i := 0; i < 30; i++ {
		if i == 10 {
			st.setDown(true)
		}
		if i == 20 {
			st.setDown(false)
		}
		line := strings.Repeat("x", 1000) + "\n"
		want.WriteString(line)
		_, _ = w.Write([]byte(line))
		w.flush()
	}
	w.close()
	if got := st.text(); got != want.String() {
		t.Fatalf("stored %d bytes, want %d: lines were lost or reordered", len(got), want.Len())
	}
	if st.fails == 0 {
		t.Fatal("the outage refused no append: the test did not test anything")
	}
	if testutil.ToFloat64(logAppendRetries) <= retries || testutil.ToFloat64(logAppendFailures) <= failures {
		t.Errorf("retries and failures not counted in the metrics")
	}
}

// hangingStore is a store whose first appends hang until their context
// ends (a connection that no longer answers).
type hangingStore struct {
	outageStore
	hangs int
}

func (s *hangingStore) AppendStepLog(ctx context.Context, runID, step, stream string, data []byte) error {
	s.mu.Lock()
	hang := s.hangs > 0
	if hang {
		s.hangs--
	}
	s.mu.Unlock()
	if hang {
		<-ctx.Done()
		return ctx.Err()
	}
	return s.outageStore.AppendStepLog(ctx, runID, step, stream, data)
}

// TestLogSurvivesHangingStore: an append that hangs is given up after a
// third of the retry window and retried; the output is stored once, in
// order, within the window.
func TestLogSurvivesHangingStore(t *testing.T) {
	st := &hangingStore{hangs: 2}
	a := &Activities{Store: st, LogRetry: 3 * time.Second}
	w := a.newLogWriter(context.Background(), "jr_1", "t/s", "stdout")
	retries := testutil.ToFloat64(logAppendRetries)
	began := time.Now()
	_, _ = w.Write([]byte("one\n"))
	_, _ = w.Write([]byte("two\n"))
	w.close()
	if got := st.text(); got != "one\ntwo\n" {
		t.Fatalf("stored %q", got)
	}
	if took := time.Since(began); took > 3*time.Second {
		t.Fatalf("the appends took %s: a hung attempt was not given up", took)
	}
	if d := testutil.ToFloat64(logAppendRetries) - retries; d < 2 {
		t.Errorf("%v retries counted, want 2", d)
	}
}

// TestLogLossReported: output the store never takes is given up at the end
// of the step, counted in the metrics; a loss in mid-step is reported by a
// marker line in the log once the store takes appends again.
func TestLogLossReported(t *testing.T) {
	st := &outageStore{}
	a := &Activities{Store: st, LogRetry: 20 * time.Millisecond}
	lost := testutil.ToFloat64(logLostBytes)
	w := a.newLogWriter(context.Background(), "jr_1", "t/s", "stdout")
	st.setDown(true)
	big := strings.Repeat("y", maxPendingLog+100)
	_, _ = w.Write([]byte(big))
	w.flush()
	st.setDown(false)
	_, _ = w.Write([]byte("after\n"))
	w.close()
	got := st.text()
	if !strings.HasPrefix(got, "--- 100 bytes of stdout lost: the store did not take them ---\n") || !strings.HasSuffix(got, "after\n") {
		t.Fatalf("log starts %q, ends %q; want the loss marker first and the last line kept", got[:min(len(got), 80)], got[max(len(got)-10, 0):])
	}
	if d := testutil.ToFloat64(logLostBytes) - lost; d != 100 {
		t.Errorf("lost bytes counted %v, want 100", d)
	}

	st2 := &outageStore{down: true}
	a2 := &Activities{Store: st2, LogRetry: 20 * time.Millisecond}
	w2 := a2.newLogWriter(context.Background(), "jr_2", "t/s", "stderr")
	lost = testutil.ToFloat64(logLostBytes)
	_, _ = w2.Write([]byte("never stored\n"))
	w2.close()
	if d := testutil.ToFloat64(logLostBytes) - lost; d != float64(len("never stored\n")) {
		t.Errorf("lost bytes at the end counted %v, want %d", d, len("never stored\n"))
	}
}
