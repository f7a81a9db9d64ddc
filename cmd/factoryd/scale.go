package main

// Scale-out: the settings and the machinery a worker needs to share the
// work with others — a stable identity and a task queue of its own, a
// heartbeat in the store, a capacity, an ops endpoint when it serves no
// API, shared snapshot storage, and patience with a Temporal that is not
// up yet.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/linefactory/linefactory/activities"
	"github.com/linefactory/linefactory/activities/sandbox"
	"github.com/linefactory/linefactory/store"
	"github.com/linefactory/linefactory/workflows"
)

// scaleConfig holds the scale-out settings (see config's doc comment).
type scaleConfig struct {
	TemporalWait time.Duration
	OpsAddr      string
	// OpsExplicit: FACTORY_OPS_ADDR was set; a default address that is
	// taken (several workers on one host) only costs the endpoint.
	OpsExplicit    bool
	WorkerMaxSteps int
	// WorkerPollers is how many long polls each of a worker's task queues
	// keeps open, per kind of task (workflow, activity).
	WorkerPollers int
	SnapshotURL   string
}

type scaleFlags struct{ wait, ops, maxSteps, pollers, snapshotURL string }

func (s *scaleConfig) flags(fs *flag.FlagSet) *scaleFlags {
	f := &scaleFlags{}
	fs.StringVar(&f.wait, "temporal-wait", env("FACTORY_TEMPORAL_WAIT", "60s"), "how long to retry an unreachable TEMPORAL_ADDRESS at start (FACTORY_TEMPORAL_WAIT)")
	fs.StringVar(&f.ops, "ops-addr", env("FACTORY_OPS_ADDR", "127.0.0.1:9090"), "/healthz, /readyz and /metrics of a worker-only process, or off (FACTORY_OPS_ADDR)")
	fs.StringVar(&f.maxSteps, "worker-max-steps", env("FACTORY_WORKER_MAX_STEPS", "64"), "steps a worker runs at once (FACTORY_WORKER_MAX_STEPS)")
	fs.StringVar(&f.pollers, "worker-pollers", env("FACTORY_WORKER_POLLERS", "8"), "long polls a worker keeps open per task queue and kind of task (FACTORY_WORKER_POLLERS)")
	fs.StringVar(&f.snapshotURL, "snapshot-url", env("FACTORY_SNAPSHOT_URL", ""), "snapshot storage: file:///dir or s3://bucket?region=… (FACTORY_SNAPSHOT_URL; default <data-dir>/sandboxes/snapshots)")
	return f
}

func (s *scaleConfig) parse(fs *flag.FlagSet, f *scaleFlags, dataDir string) error {
	d, err := time.ParseDuration(f.wait)
	if err != nil || d < 0 {
		return fmt.Errorf("--temporal-wait: %q is not a duration such as 60s", f.wait)
	}
	s.TemporalWait = d
	n, err := strconv.Atoi(f.maxSteps)
	if err != nil || n <= 0 {
		return fmt.Errorf("--worker-max-steps: %q is not a positive integer", f.maxSteps)
	}
	s.WorkerMaxSteps = n
	if n, err = strconv.Atoi(f.pollers); err != nil || n < 2 {
		return fmt.Errorf("--worker-pollers: %q is not an integer of at least 2", f.pollers)
	}
	s.WorkerPollers = n
	s.OpsAddr = f.ops
	s.OpsExplicit = os.Getenv("FACTORY_OPS_ADDR") != ""
	fs.Visit(func(fl *flag.Flag) {
		if fl.Name == "ops-addr" {
			s.OpsExplicit = true
		}
	})
	s.SnapshotURL = f.snapshotURL
	if s.SnapshotURL == "" {
		if s.SnapshotURL, err = sandbox.FileSnapshotsURL(filepath.Join(dataDir, "sandboxes", "snapshots")); err != nil {
			return fmt.Errorf("--snapshot-url: %w", err)
		}
	}
	if !strings.Contains(s.SnapshotURL, "://") {
		return fmt.Errorf("--snapshot-url: %q is not a URL (file:///dir, s3://bucket)", s.SnapshotURL)
	}
	return nil
}

// dialTemporal connects to Temporal; an external server that does not
// answer yet (or lacks the namespace, while its setup runs) is retried with
// backoff for wait, each attempt logged.
func dialTemporal(ctx context.Context, opts client.Options, external bool, wait time.Duration, logger *slog.Logger) (client.Client, error) {
	deadline := time.Now().Add(wait)
	backoff := 250 * time.Millisecond
	for attempt := 1; ; attempt++ {
		c, err := client.DialContext(ctx, opts)
		if err == nil {
			_, err = c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: opts.Namespace})
			var nf *serviceerror.NamespaceNotFound
			if err == nil || !errors.As(err, &nf) {
				return c, nil // other errors (permissions) are the SDK's to report
			}
			c.Close()
			err = fmt.Errorf("namespace %q does not exist (yet)", opts.Namespace)
		}
		if !external || ctx.Err() != nil || time.Now().Add(backoff).After(deadline) {
			return nil, fmt.Errorf("connect to Temporal at %s (%d attempts): %w", opts.HostPort, attempt, err)
		}
		logger.Warn("Temporal not reachable yet, retrying", slog.String("address", opts.HostPort), slog.Int("attempt", attempt),
			slog.Duration("retry_in", backoff), slog.Duration("gives_up_in", time.Until(deadline).Round(time.Second)),
			slog.String("error", err.Error()))
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

// openStore opens the store, retrying for a while: processes starting
// together on a fresh database race to migrate it (the losers see "already
// exists" once and nothing the next time), and PostgreSQL may come up after
// them.
func openStore(ctx context.Context, dsn string, pool store.Pool, wait time.Duration, logger *slog.Logger) (*store.Store, error) {
	deadline := time.Now().Add(wait)
	backoff := 200 * time.Millisecond
	for attempt := 1; ; attempt++ {
		st, err := store.OpenPool(ctx, dsn, pool)
		if err == nil {
			return st, nil
		}
		if ctx.Err() != nil || time.Now().Add(backoff).After(deadline) {
			return nil, err
		}
		logger.Warn("store not ready yet, retrying", slog.Int("attempt", attempt), slog.Duration("retry_in", backoff),
			slog.String("error", err.Error()))
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

// workerIdentity is the worker's id, kept in its data directory so that a
// restarted worker is the same worker (its sandboxes are still its own).
func workerIdentity(dataDir string) (string, error) {
	path := filepath.Join(dataDir, "worker-id")
	if data, err := os.ReadFile(path); err == nil {
		if id := strings.TrimSpace(string(data)); id != "" {
			return id, nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("worker id: %w", err)
	}
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	host, _ := os.Hostname()
	host = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return -1
	}, strings.ToLower(host))
	if len(host) > 20 {
		host = host[:20]
	}
	id := "w-" + hex.EncodeToString(b[:])
	if host != "" {
		id = "w-" + host + "-" + hex.EncodeToString(b[:])
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("worker id: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("worker id: %w", err)
	}
	return id, nil
}

// workerSet is a worker process's Temporal workers: one on the shared
// queue (workflows, sandbox acquisition for any task), one on the worker's
// own queue (everything that uses a sandbox it holds).
type workerSet struct {
	id      string
	queue   string
	workers []worker.Worker
	// gauges are the worker's metrics (its capacity).
	gauges []prometheus.Collector
}

// startWorkers starts the workers of a worker process and its heartbeat.
func startWorkers(ctx context.Context, cfg config, c client.Client, st *store.Store, acts *activities.Activities, logger *slog.Logger) (*workerSet, error) {
	id, err := workerIdentity(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	ws := &workerSet{id: id, queue: activities.WorkerQueue(workflows.TaskQueue, id)}
	// With the embedded server this process is the only worker: nothing to
	// route, and steps keep eager dispatch on the shared queue.
	alone := cfg.TemporalAddress == ""
	if alone {
		ws.queue = ""
	}
	acts.Placements, acts.Worker = st, activities.Worker{ID: id, Queue: ws.queue, Alone: alone}
	self := store.Worker{ID: id, Queue: ws.queue, MaxSteps: cfg.Scale.WorkerMaxSteps, StartedAt: time.Now().UTC()}
	if err := st.HeartbeatWorker(ctx, self); err != nil {
		return nil, err
	}
	// A graceful stop (SIGTERM) drains: the worker takes no new work and
	// running steps may finish for up to FACTORY_SHUTDOWN_GRACE; steps
	// still running then are interrupted (their context ends with
	// worker.ErrWorkerShutdown) and re-run by the next worker, which uses
	// up none of their attempts.
	//
	// Pollers: the SDK's default of two long polls per queue leaves a
	// worker's tasks waiting in Temporal's matching, persisted to its
	// store and read back, whenever more than two arrive while both polls
	// are in flight. A run's workflow tasks hold their local activities (its
	// record writes), so under load factoryd's tasks outnumber its polls:
	// 20 concurrent 3-stage lines with 8 polls ran 0.805-0.815x bare
	// Temporal's rate against 0.735-0.75x with 2 (three alternated runs
	// each, one process; bare Temporal's rate did not move with 8).
	pollers := cfg.Scale.WorkerPollers
	shared := worker.New(c, workflows.TaskQueue, worker.Options{WorkerStopTimeout: cfg.ShutdownGrace, Identity: id,
		MaxConcurrentActivityExecutionSize: cfg.Scale.WorkerMaxSteps,
		MaxConcurrentWorkflowTaskPollers:   pollers, MaxConcurrentActivityTaskPollers: pollers})
	workflows.Register(shared, acts)
	all := []worker.Worker{shared}
	if !alone {
		own := worker.New(c, ws.queue, worker.Options{WorkerStopTimeout: cfg.ShutdownGrace, Identity: id + "/own",
			MaxConcurrentActivityExecutionSize: cfg.Scale.WorkerMaxSteps, DisableWorkflowWorker: true,
			MaxConcurrentActivityTaskPollers: pollers})
		own.RegisterActivity(acts)
		all = []worker.Worker{own, shared}
	}
	for _, w := range all {
		if err := w.Start(); err != nil {
			ws.stop()
			return nil, fmt.Errorf("start worker: %w", err)
		}
		ws.workers = append(ws.workers, w)
	}
	maxSteps := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "linefactory_worker_max_steps",
		Help: "Steps (and sandbox acquisitions) this worker runs at once: FACTORY_WORKER_MAX_STEPS."}, []string{"worker_id", "queue"})
	maxSteps.WithLabelValues(id, ws.queue).Set(float64(cfg.Scale.WorkerMaxSteps))
	ws.gauges = append(ws.gauges, maxSteps)
	logger.Info("worker polling", slog.String("worker_id", id), slog.String("own_queue", ws.queue),
		slog.Int("max_steps", cfg.Scale.WorkerMaxSteps))
	go func() {
		t := time.NewTicker(activities.WorkerHeartbeat)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if err := st.HeartbeatWorker(ctx, self); err != nil && ctx.Err() == nil {
					logger.Warn("worker heartbeat", slog.String("error", err.Error()))
				}
			}
		}
	}()
	return ws, nil
}

func (ws *workerSet) stop() {
	if ws == nil {
		return
	}
	for _, w := range ws.workers {
		w.Stop()
	}
}

// metrics are the collectors of the worker's metrics (none without the
// worker role).
func (ws *workerSet) metrics() []prometheus.Collector {
	if ws == nil {
		return nil
	}
	return ws.gauges
}

// serveOps serves /healthz, /readyz and /metrics for a process without the
// API role, until ctx is done.
func serveOps(ctx context.Context, addr string, explicit bool, ready map[string]func(context.Context) error, metrics []prometheus.Collector, logger *slog.Logger) error {
	if addr == "" || addr == "off" {
		return nil
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(metrics...)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok"}` + "\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		cctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
		defer cancel()
		checks := map[string]string{}
		status, code := "ready", http.StatusOK
		for name, check := range ready {
			checks[name] = "ok"
			if err := check(cctx); err != nil {
				checks[name], status, code = err.Error(), "unavailable", http.StatusServiceUnavailable
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(map[string]any{"status": status, "checks": checks})
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	ln, err := net.Listen("tcp", addr)
	if err != nil && !explicit {
		logger.Warn("no ops endpoint: the default address is taken; set FACTORY_OPS_ADDR", slog.String("addr", addr), slog.String("error", err.Error()))
		return nil
	}
	if err != nil {
		return fmt.Errorf("listen on %s (FACTORY_OPS_ADDR): %w", addr, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	go func() { _ = srv.Serve(ln) }()
	logger.Info("ops endpoint listening", slog.String("addr", "http://"+ln.Addr().String()))
	return nil
}
