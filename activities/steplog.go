package activities

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/prometheus/client_golang/prometheus"
	"go.temporal.io/sdk/activity"
)

// Step output on its way to the store, counted for /metrics.
var (
	logAppendRetries = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "linefactory_step_log_append_retries_total",
		Help: "Appends of step output to the store that failed and were retried.",
	})
	logAppendFailures = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "linefactory_step_log_append_failures_total",
		Help: "Appends of step output the store did not take within the retry window.",
	})
	logLostBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "linefactory_step_log_lost_bytes_total",
		Help: "Bytes of step output given up after the store refused them for too long.",
	})
)

// Collectors are the activities' metrics, for the /metrics registry.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{logAppendRetries, logAppendFailures, logLostBytes}
}

// DefaultLogRetry is how long one append of step output is retried.
const DefaultLogRetry = 30 * time.Second

// maxPendingLog bounds the output kept for a later append while the store
// refuses appends; beyond it the oldest pending output is given up.
const maxPendingLog = 4 << 20

// logWriter streams a step's output to the store in chunks. An append the
// store refuses is retried with backoff; output it still refuses stays
// pending for the next append (up to maxPendingLog), and what is finally
// given up is logged, counted in /metrics and reported in the step's log
// by a marker line once the store takes appends again.
type logWriter struct {
	ctx    context.Context
	store  Store
	logger *slog.Logger
	retry  time.Duration
	runID  string
	step   string
	stream string

	mu   sync.Mutex
	buf  []byte
	last time.Time

	flushing sync.Mutex // one append at a time: chunks keep their order
	lost     int64      // given up, not yet reported in the log
}

func (a *Activities) newLogWriter(ctx context.Context, runID, step, stream string) *logWriter {
	retry := a.LogRetry
	if retry <= 0 {
		retry = DefaultLogRetry
	}
	return &logWriter{ctx: ctx, store: a.Store, logger: a.Logger, retry: retry, runID: runID, step: step, stream: stream}
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.buf = append(w.buf, p...)
	due := len(w.buf) >= 16<<10 || time.Since(w.last) > 250*time.Millisecond
	w.mu.Unlock()
	if due {
		w.flush()
	}
	return len(p), nil
}

// flush appends what is buffered; what the store refuses stays buffered.
func (w *logWriter) flush() {
	w.flushing.Lock()
	defer w.flushing.Unlock()
	w.mu.Lock()
	data := w.buf
	w.buf = nil
	w.last = time.Now()
	w.mu.Unlock()
	if len(data) == 0 {
		return
	}
	if err := w.append(data); err != nil {
		w.mu.Lock()
		w.buf = append(data, w.buf...)
		if over := len(w.buf) - maxPendingLog; over > 0 {
			w.giveUp(int64(over), err)
			w.buf = w.buf[over:]
		}
		w.mu.Unlock()
	}
}

// close appends what is left; what the store still refuses is given up.
func (w *logWriter) close() {
	w.flush()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) > 0 {
		w.giveUp(int64(len(w.buf)), fmt.Errorf("the store refused the step's last output"))
		w.buf = nil
	}
}

// append writes data, preceded by the report of output given up before,
// retrying with backoff for up to w.retry, each attempt for up to a third
// of it.
func (w *logWriter) append(data []byte) error {
	if w.lost > 0 {
		data = append([]byte(fmt.Sprintf("--- %d bytes of %s lost: the store did not take them ---\n", w.lost, w.stream)), data...)
	}
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval = min(100*time.Millisecond, w.retry/5), 2*time.Second
	ctx := context.WithoutCancel(w.ctx)
	_, err := backoff.Retry(ctx, func() (struct{}, error) {
		// One attempt is bounded too: a connection that hangs (a network
		// partition, not a refusal) is given up and the append retried.
		actx, cancel := context.WithTimeout(ctx, max(w.retry/3, 10*time.Millisecond))
		defer cancel()
		return struct{}{}, w.store.AppendStepLog(actx, w.runID, w.step, w.stream, data)
	}, backoff.WithBackOff(b), backoff.WithMaxElapsedTime(w.retry), backoff.WithNotify(func(err error, next time.Duration) {
		logAppendRetries.Inc()
		if w.logger != nil {
			w.logger.Warn("append step output: retrying", slog.String("run_id", w.runID), slog.String("step", w.step),
				slog.Duration("in", next), slog.String("error", err.Error()))
		}
	}))
	if err != nil {
		logAppendFailures.Inc()
		return err
	}
	w.lost = 0
	return nil
}

// giveUp records n bytes of output as lost; w.mu is held.
func (w *logWriter) giveUp(n int64, err error) {
	w.lost += n
	logLostBytes.Add(float64(n))
	if w.logger != nil {
		w.logger.Error("step output lost: the store did not take it", slog.String("run_id", w.runID), slog.String("step", w.step),
			slog.String("stream", w.stream), slog.Int64("bytes", n), slog.String("error", err.Error()))
	}
}

// attemptOf is the activity attempt ctx runs (1 outside an activity).
func attemptOf(ctx context.Context) int {
	if !activity.IsActivity(ctx) {
		return 1
	}
	return int(activity.GetInfo(ctx).Attempt)
}

// attemptMarker is the line that opens the output of a step's attempt
// after the first, so repeated output is told apart.
func attemptMarker(attempt int) []byte {
	return []byte(fmt.Sprintf("--- attempt %d ---\n", attempt))
}
