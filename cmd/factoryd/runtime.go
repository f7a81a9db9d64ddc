package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"

	"github.com/linefactory/linefactory/activities"
	"github.com/linefactory/linefactory/activities/sandbox"
	"github.com/linefactory/linefactory/admit"
	"github.com/linefactory/linefactory/cmd/internal/embedded"
	"github.com/linefactory/linefactory/manifests/run"
	"github.com/linefactory/linefactory/store"
	"github.com/linefactory/linefactory/workflows"
)

// runtime is the Temporal side of factoryd: an embedded server (unless
// TEMPORAL_ADDRESS names one), a client, and the worker for the worker role.
type runtime struct {
	server    *embedded.Server
	client    client.Client
	workers   *workerSet
	snapshots *sandbox.Snapshots
	sandboxes *sandbox.Local // the worker's driver (its sandbox networks)
	// statusAttribute: the namespace has LinefactoryStatus (routing.go).
	statusAttribute bool
}

func startRuntime(ctx context.Context, cfg config, st *store.Store, logger *slog.Logger) (*runtime, error) {
	rt := &runtime{}
	addr := cfg.TemporalAddress
	if addr == "" {
		port, uiAddr := cfg.TemporalPort, cfg.TemporalUIAddr
		if !cfg.TemporalPortsExplicit {
			// Defaults that another process holds give way to free ports.
			if busy(fmt.Sprintf("127.0.0.1:%d", port)) {
				port = 0
			}
			if uiAddr != "off" && busy(uiAddr) {
				uiAddr = "127.0.0.1:0"
			}
		}
		srv, err := embedded.Start(ctx, embedded.Config{
			DataDir: filepath.Join(cfg.DataDir, "temporal"), Namespace: cfg.TemporalNamespace,
			FrontendPort: port, UIAddr: uiAddr, LogLevel: cfg.TemporalLogLevel,
		})
		if err != nil {
			return nil, err
		}
		rt.server = srv
		addr = srv.FrontendAddr()
		logger.Info("embedded Temporal started", slog.String("frontend", addr), slog.String("web_ui", srv.UIURL()),
			slog.String("namespace", cfg.TemporalNamespace))
	}
	opts := client.Options{
		HostPort:  addr,
		Namespace: cfg.TemporalNamespace,
		Logger:    tlog.NewStructuredLogger(logger.With(slog.String("component", "temporal-client"))),
		// loopback: compression costs more than it saves
		ConnectionOptions: client.ConnectionOptions{GrpcCompression: &client.GrpcCompressionNone{}},
	}
	if rt.server != nil {
		embeddedCredentials(&opts, rt.server)
	} else if err := cfg.TemporalAuth.apply(&opts, addr); err != nil {
		return nil, err
	}
	c, err := dialTemporal(ctx, opts, cfg.TemporalAddress != "", cfg.Scale.TemporalWait, logger)
	if err != nil {
		rt.Close()
		return nil, err
	}
	rt.client = c
	rt.statusAttribute = registerStatusSearchAttribute(ctx, c, cfg.TemporalNamespace, logger)
	if cfg.Roles["worker"] {
		drv, err := newSandboxDriver(cfg, logger)
		if err != nil {
			rt.Close()
			return nil, err
		}
		// Steps of a worker that died (SIGKILL, OOM) may have left processes
		// behind; their activities are retried here or elsewhere.
		if killed := drv.KillLeftovers(); len(killed) > 0 {
			logger.Warn("killed processes left by a previous worker", slog.Any("pids", killed))
		}
		if rt.snapshots, err = sandbox.OpenSnapshots(ctx, cfg.Scale.SnapshotURL); err != nil {
			rt.Close()
			return nil, err
		}
		drv.Snapshots = rt.snapshots
		rt.sandboxes = drv
		acts := &activities.Activities{Store: st, Definitions: st, Sandboxes: drv, Logger: logger, Rates: cfg.Rates, Agents: cfg.Agents,
			Inference: cfg.Inference, Knowledge: st, InferenceTokens: st}
		acts.Admit, acts.Starts = &admit.Admitter{Store: st}, rt // schedule firings admit their runs
		if rt.workers, err = startWorkers(ctx, cfg, c, st, acts, logger); err != nil {
			rt.Close()
			return nil, err
		}
		go reapSandboxes(ctx, drv, logger, func(name string) { _ = st.UnplaceSandbox(ctx, name, rt.workers.id) })
		rec := &activities.Reconciler{Store: st, Engine: rt, Logger: logger, Grace: cfg.ReconcileGrace}
		go rec.Run(ctx, cfg.ReconcileInterval)
	}
	return rt, nil
}

// Close stops the worker, the client and the embedded server.
func (rt *runtime) Close() {
	rt.workers.stop()
	if rt.sandboxes != nil {
		rt.sandboxes.Close() // the workers stopped: no step runs; idle sandboxes' groups go too
	}
	if rt.client != nil {
		rt.client.Close()
	}
	if rt.server != nil {
		_ = rt.server.Stop()
	}
	if rt.snapshots != nil {
		_ = rt.snapshots.Close()
	}
}

// ReadyChecks reports whether Temporal answers.
func (rt *runtime) ReadyChecks() map[string]func(context.Context) error {
	return map[string]func(context.Context) error{
		"temporal": func(ctx context.Context) error {
			_, err := rt.client.CheckHealth(ctx, &client.CheckHealthRequest{})
			return err
		},
	}
}

// StartJobRun starts a job run's workflow. Its id is the run's, and an id
// once used is never run again: a repeated start (a retried admission) finds
// the workflow there and is no error.
func (rt *runtime) StartJobRun(ctx context.Context, in workflows.JobRunInput) error {
	_, err := rt.client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: run.JobRunWorkflowID(in.RunID), TaskQueue: workflows.TaskQueue,
		WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
	}, workflows.JobRunWorkflowName, in)
	return err
}

// StartFiredJobRun starts the workflow of a job run a schedule fired.
func (rt *runtime) StartFiredJobRun(ctx context.Context, r activities.FiredJobRun) error {
	return rt.StartJobRun(ctx, workflows.FiredJobRunInput(r))
}

// StartFiredLineRun starts the manager of a line run a schedule fired.
func (rt *runtime) StartFiredLineRun(ctx context.Context, r activities.FiredLineRun) error {
	return rt.StartLineRun(ctx, workflows.FiredLineRunInput(r))
}

// CancelJobRun asks a job run's workflow to stop. A workflow that is gone
// or already completed (Temporal answers NotFound) needs no stop: nil.
func (rt *runtime) CancelJobRun(ctx context.Context, runID string) error {
	err := rt.client.CancelWorkflow(ctx, run.JobRunWorkflowID(runID), "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return nil
	}
	return err
}

// reapSandboxes applies sandbox lifecycles (pause_after_idle, pause_after,
// delete_after) every 15 seconds until ctx is done.
func reapSandboxes(ctx context.Context, drv *sandbox.Local, logger *slog.Logger, forget func(name string)) {
	t := time.NewTicker(15 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			rep, err := drv.Reap(ctx, now)
			if err != nil && ctx.Err() == nil {
				logger.Warn("sandbox reaper", slog.String("error", err.Error()))
			}
			for _, name := range rep.Deleted {
				forget(name)
			}
			if len(rep.Paused)+len(rep.Deleted) > 0 {
				logger.Info("sandbox reaper", slog.Any("paused", rep.Paused), slog.Any("deleted", rep.Deleted))
			}
		}
	}
}

// StartLineRun starts a line run's manager workflow (an id once used is
// never run again, as StartJobRun's).
func (rt *runtime) StartLineRun(ctx context.Context, in workflows.LineRunInput) error {
	_, err := rt.client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: run.LineRunWorkflowID(in.RunID), TaskQueue: workflows.TaskQueue,
		WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		TypedSearchAttributes: rt.lineRunSearchAttributes(),
	}, workflows.LineRunWorkflowName, in)
	return err
}

// CancelLineRun asks a line run's manager to stop; its running stage is
// cancelled with it.
func (rt *runtime) CancelLineRun(ctx context.Context, runID string) error {
	return rt.client.CancelWorkflow(ctx, run.LineRunWorkflowID(runID), "")
}

// busy tells whether a TCP address is taken.
func busy(addr string) bool {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return true
	}
	l.Close()
	return false
}

// UpsertSchedule creates or updates the Temporal Schedule that fires a
// line's schedule; each firing carries the generation it was made for.
func (rt *runtime) UpsertSchedule(ctx context.Context, sc store.LineSchedule) error {
	spec := client.ScheduleSpec{CronExpressions: []string{sc.Cron}, TimeZoneName: sc.Timezone}
	action := &client.ScheduleWorkflowAction{ID: "schedulefire/" + sc.LineName, Workflow: workflows.ScheduleFireWorkflowName,
		Args: []any{workflows.ScheduleFireInput{LineName: sc.LineName, Generation: sc.ScheduleGeneration}}, TaskQueue: workflows.TaskQueue}
	// Upserts racing from several API processes: an older generation never
	// replaces a newer one (its firings would all be fenced off as stale).
	newer := func(p *commonpb.Payload) bool {
		var cur workflows.ScheduleFireInput
		return converter.GetDefaultDataConverter().FromPayload(p, &cur) == nil && cur.Generation > sc.ScheduleGeneration
	}
	return rt.upsertTemporalSchedule(ctx, run.LineScheduleID(sc.LineName), spec, action, !sc.Enabled, newer)
}

// UpsertJobSchedule creates or updates the Temporal Schedule that fires a
// job's [schedule] (paused when disabled); each firing carries the job
// version it was made for.
func (rt *runtime) UpsertJobSchedule(ctx context.Context, sc workflows.JobSchedule) error {
	spec := client.ScheduleSpec{CronExpressions: []string{sc.Cron}, TimeZoneName: sc.Timezone}
	action := &client.ScheduleWorkflowAction{ID: "jobschedulefire/" + sc.JobName, Workflow: workflows.JobScheduleFireWorkflowName,
		Args: []any{workflows.JobScheduleFireInput{JobName: sc.JobName, JobVersionID: sc.JobVersionID}}, TaskQueue: workflows.TaskQueue}
	// Version ids sort by creation: an older version never replaces a newer.
	newer := func(p *commonpb.Payload) bool {
		var cur workflows.JobScheduleFireInput
		return converter.GetDefaultDataConverter().FromPayload(p, &cur) == nil && cur.JobVersionID > sc.JobVersionID
	}
	return rt.upsertTemporalSchedule(ctx, run.JobScheduleID(sc.JobName), spec, action, !sc.Enabled, newer)
}

// DeleteJobSchedule removes a job's Temporal Schedule, if any.
func (rt *runtime) DeleteJobSchedule(ctx context.Context, job string) error {
	return rt.deleteTemporalSchedule(ctx, run.JobScheduleID(job))
}

// upsertTemporalSchedule creates the Temporal Schedule id, or replaces the
// spec, action and paused state of the one there is.
//
// newer tells, from the first argument of the schedule's current action,
// that it was made for a newer definition than this one: then the schedule
// is left as it is.
func (rt *runtime) upsertTemporalSchedule(ctx context.Context, id string, spec client.ScheduleSpec, action *client.ScheduleWorkflowAction,
	paused bool, newer func(*commonpb.Payload) bool) error {
	h := rt.client.ScheduleClient().GetHandle(ctx, id)
	if _, err := h.Describe(ctx); err != nil {
		var nf *serviceerror.NotFound
		if !errors.As(err, &nf) {
			return err
		}
		_, err = rt.client.ScheduleClient().Create(ctx, client.ScheduleOptions{ID: id, Spec: spec, Action: action, Paused: paused})
		var exists *serviceerror.AlreadyExists
		if !errors.Is(err, temporal.ErrScheduleAlreadyRunning) && !errors.As(err, &exists) {
			return err
		}
		// Made meanwhile by another process: update it instead.
	}
	return h.Update(ctx, client.ScheduleUpdateOptions{DoUpdate: func(in client.ScheduleUpdateInput) (*client.ScheduleUpdate, error) {
		s := in.Description.Schedule
		if cur, ok := s.Action.(*client.ScheduleWorkflowAction); ok && len(cur.Args) > 0 {
			if p, ok := cur.Args[0].(*commonpb.Payload); ok && newer(p) {
				return nil, temporal.ErrSkipScheduleUpdate
			}
		}
		s.Spec, s.Action = &spec, action
		if s.State == nil {
			s.State = &client.ScheduleState{}
		}
		s.State.Paused = paused
		return &client.ScheduleUpdate{Schedule: &s}, nil
	}})
}

// deleteTemporalSchedule removes a Temporal Schedule; none is no error.
func (rt *runtime) deleteTemporalSchedule(ctx context.Context, id string) error {
	err := rt.client.ScheduleClient().GetHandle(ctx, id).Delete(ctx)
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return nil
	}
	return err
}

// DeleteSchedule removes a line's Temporal Schedule, if any.
func (rt *runtime) DeleteSchedule(ctx context.Context, line string) error {
	return rt.deleteTemporalSchedule(ctx, run.LineScheduleID(line))
}
