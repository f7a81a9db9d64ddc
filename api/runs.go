package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/linefactory/linefactory/admit"
	"github.com/linefactory/linefactory/manifests"
	"github.com/linefactory/linefactory/manifests/run"
	"github.com/linefactory/linefactory/store"
	"github.com/linefactory/linefactory/workflows"
)

// Runs starts and stops runs on Temporal.
type Runs interface {
	StartJobRun(ctx context.Context, in workflows.JobRunInput) error
	CancelJobRun(ctx context.Context, runID string) error
	StartLineRun(ctx context.Context, in workflows.LineRunInput) error
	CancelLineRun(ctx context.Context, runID string) error
	// UpsertSchedule makes the engine fire a line's schedule; DeleteSchedule
	// stops it (no error when there is none).
	UpsertSchedule(ctx context.Context, sc store.LineSchedule) error
	DeleteSchedule(ctx context.Context, line string) error
	// UpsertJobSchedule makes the engine fire a job's [schedule] for the
	// version that carries it (paused when disabled); DeleteJobSchedule
	// stops it (no error when there is none).
	UpsertJobSchedule(ctx context.Context, sc workflows.JobSchedule) error
	DeleteJobSchedule(ctx context.Context, job string) error
}

// RunStore is what the run endpoints need of the store.
type RunStore interface {
	GetJobVersionByID(ctx context.Context, id string) (store.JobVersion, error)
	CreateJobRun(ctx context.Context, r store.JobRun) (store.JobRun, error)
	GetJobRun(ctx context.Context, id string) (store.JobRun, error)
	GetJobRunJSON(ctx context.Context, id string) (json.RawMessage, error)
	ListJobRunsJSON(ctx context.Context, f store.RunSearch) ([]json.RawMessage, error)
	UpdateJobRun(ctx context.Context, id string, change func(*store.JobRun) error) (store.JobRun, error)
	ReadStepLogs(ctx context.Context, runID, step string, afterSeq int64) ([]store.LogChunk, error)
}

// admission admits runs into the API's store (package admit), on the API's
// clock.
func (s *Server) admission() admit.Admitter {
	return admit.Admitter{Store: s.store, Now: s.now}
}

type startJobRunRequest struct {
	Params    map[string]any `json:"params"`
	VersionID *string        `json:"version_id"`
}

func (s *Server) startJobRun(c *gin.Context) error {
	ctx := c.Request.Context()
	name := c.Param("name")
	var req startJobRunRequest
	if err := bindJSON(c, &req); err != nil {
		return err
	}
	if le := manifests.CheckParamsSize(req.Params); le != nil {
		return le
	}
	if _, err := s.store.GetJob(ctx, name); err != nil {
		return err
	}
	var (
		v   store.JobVersion
		err error
	)
	if req.VersionID != nil {
		v, err = s.store.GetJobVersion(ctx, name, *req.VersionID)
		if errors.Is(err, store.ErrNotFound) {
			return invalid("value_error", fmt.Sprintf("%q is not a version of job %q", *req.VersionID, name), "body", "version_id")
		}
	} else {
		v, err = s.store.LatestJobVersion(ctx, name)
	}
	if err != nil {
		return err
	}
	var m manifests.JobManifest
	if err := json.Unmarshal(v.Manifest, &m); err != nil {
		return fmt.Errorf("decode job version %s: %w", v.ID, err)
	}
	params, ps := manifests.ApplyParams(m.Job.Params, req.Params)
	if ps != nil {
		return problemsInvalid(ps)
	}
	if raw, err := json.Marshal(params); err == nil {
		if le := manifests.CheckRunHistory(&m, len(raw)); le != nil {
			return le
		}
	}
	if s.cfg.Runs == nil {
		return httpError(http.StatusServiceUnavailable, CodeResourceUnavailable, "this server runs no workflow engine (roles without Temporal)")
	}
	id := run.NewJobRunID()
	in := workflows.JobRunInput{Version: workflows.JobRunInputVersion, RunID: id, JobName: name, JobVersionID: v.ID, Manifest: m, Params: params}
	rec, err := s.admission().JobRun(ctx, store.JobRun{ID: id, JobName: name, JobVersionID: v.ID, Status: run.Queued,
		RunParams: params, Region: m.Run.RegionOrNil(), WorkflowID: run.JobRunWorkflowID(id)}, func(ctx context.Context) error { return s.cfg.Runs.StartJobRun(ctx, in) })
	if errors.Is(err, admit.ErrNotDispatched) {
		s.log.Warn("job run not dispatched", "run_id", id, "error", err.Error())
		return httpError(http.StatusBadGateway, CodeBadGateway, "the workflow engine did not accept the run %s", id)
	}
	if err != nil {
		return err
	}
	c.JSON(http.StatusCreated, jobRunResponse(rec))
	return nil
}

func (s *Server) listJobRuns(c *gin.Context) error {
	ctx := c.Request.Context()
	limit, offset, err := page(c)
	if err != nil {
		return err
	}
	status := run.Status(c.Query("status"))
	if status != "" && !run.JobRun.Valid(status) {
		return invalid("enum", "status must be one of queued, running, succeeded, failed, cancelled, timed_out", "query", "status")
	}
	summary, err := summaryRequested(c)
	if err != nil {
		return err
	}
	// The items are the stored documents with their timelines spliced in,
	// as GET /job-runs/{id} serves them (runviews_test.go); the summary
	// reads no timeline.
	runs, err := s.store.ListJobRunsJSON(ctx, store.RunSearch{Name: c.Param("name"), Status: status, Limit: limit, Offset: offset,
		WithoutTimeline: summary})
	if err != nil {
		return err
	}
	// Jobs are never deleted: only an empty page needs the look-up that
	// tells an unknown job (404) from one without such runs.
	if len(runs) == 0 {
		if _, err := s.store.GetJob(ctx, c.Param("name")); err != nil {
			return err
		}
	}
	return writeRawRunList(c, runs)
}

// getJobRun answers with the stored run document as is: it is the
// JobRunResponse's JSON already (runviews_test.go), so it is neither decoded
// nor encoded again.
func (s *Server) getJobRun(c *gin.Context) error {
	doc, err := s.store.GetJobRunJSON(c.Request.Context(), c.Param("run_id"))
	if err != nil {
		return err
	}
	writeJSONDoc(c, doc)
	return nil
}

type stopRequest struct {
	Reason *string `json:"reason"`
}

func (s *Server) stopJobRun(c *gin.Context) error {
	ctx := c.Request.Context()
	var req stopRequest
	if err := bindJSON(c, &req); err != nil {
		return err
	}
	r, err := s.store.GetJobRun(ctx, c.Param("run_id"))
	if err != nil {
		return err
	}
	if r.JobName != c.Param("name") {
		return httpError(http.StatusNotFound, CodeNotFound, "job run %q is not a run of job %q", r.ID, c.Param("name"))
	}
	if run.JobRun.Terminal(r.Status) {
		c.JSON(http.StatusAccepted, jobRunResponse(r)) // stopping a finished run changes nothing
		return nil
	}
	if s.cfg.Runs == nil {
		return httpError(http.StatusServiceUnavailable, CodeResourceUnavailable, "this server runs no workflow engine")
	}
	reason := "stopped by " + c.GetString(actorKey)
	if req.Reason != nil && *req.Reason != "" {
		reason = *req.Reason
	}
	r, err = s.store.UpdateJobRun(ctx, r.ID, func(r *store.JobRun) error {
		if run.JobRun.Terminal(r.Status) {
			return errRunFinished // it finished meanwhile: never touch a finished run
		}
		r.StopReason = &reason
		return nil
	})
	if errors.Is(err, errRunFinished) {
		return s.answerStop(c, c.Param("run_id"))
	}
	if err != nil {
		return err
	}
	if err := s.cfg.Runs.CancelJobRun(ctx, r.ID); err != nil {
		// The engine refuses to cancel a workflow that has just completed:
		// the run is then final (or about to be), and the stop is moot.
		if cur, gerr := s.store.GetJobRun(ctx, r.ID); gerr == nil && run.JobRun.Terminal(cur.Status) {
			c.JSON(http.StatusAccepted, jobRunResponse(cur))
			return nil
		}
		s.log.Warn("cancel job run", "run_id", r.ID, "error", err.Error())
		return httpError(http.StatusBadGateway, CodeBadGateway, "the workflow engine did not accept the stop of %s", r.ID)
	}
	s.endStoppedJobRun(ctx, r, reason)
	return s.answerStop(c, r.ID)
}

var errRunFinished = errors.New("the run is finished")

// answerStop answers 202 with the run as it is now.
func (s *Server) answerStop(c *gin.Context, id string) error {
	r, err := s.store.GetJobRun(c.Request.Context(), id)
	if err != nil {
		return err
	}
	c.JSON(http.StatusAccepted, jobRunResponse(r))
	return nil
}

// resolveLogStep turns the step query of the logs endpoint into the key
// logs are stored under, "<task>/<step>". A bare step name is accepted
// when exactly one task has a step of that name; several is a 422.
func resolveLogStep(jr store.JobRun, step string) (string, error) {
	if step == "" {
		return step, nil
	}
	var matches []string
	for _, e := range jr.StepTimeline {
		if e.Name == step || e.TaskName+"/"+e.Name == step {
			matches = append(matches, e.TaskName+"/"+e.Name)
		}
	}
	switch len(matches) {
	case 0:
		if len(jr.StepTimeline) == 0 {
			return step, nil // the run has not laid out its steps yet
		}
		return "", invalid("value_error", fmt.Sprintf("the run has no step %q (steps are named task/step, or by a bare name when one task has it)", step), "query", "step")
	case 1:
		return matches[0], nil
	}
	return "", invalid("value_error", fmt.Sprintf("step %q is ambiguous: use one of %s", step, strings.Join(matches, ", ")), "query", "step")
}

// logEvent is one Server-Sent Event of a followed log.
type logEvent struct {
	Step   string `json:"step"`
	Stream string `json:"stream"`
	Data   string `json:"data"`
}

func (s *Server) jobRunLogs(c *gin.Context) error {
	ctx := c.Request.Context()
	id, step := c.Param("run_id"), c.Query("step")
	jr, err := s.store.GetJobRun(ctx, id)
	if err != nil {
		return err
	}
	if step, err = resolveLogStep(jr, step); err != nil {
		return err
	}
	follow, err := wantsFollow(c)
	if err != nil {
		return err
	}
	if !follow {
		return s.jobRunLogsText(c, id, step)
	}
	s.jobRunLogsStream(c, id, step)
	return nil
}

// jobRunLogsText answers with a run's logs so far as plain text; all steps'
// logs are headed by the step's name.
func (s *Server) jobRunLogsText(c *gin.Context, id, step string) error {
	ctx := c.Request.Context()
	var b strings.Builder
	last := ""
	var after int64
	for {
		chunks, err := s.store.ReadStepLogs(ctx, id, step, after)
		if err != nil {
			return err
		}
		for _, ch := range chunks {
			if step == "" && ch.Step != last {
				fmt.Fprintf(&b, "==> %s <==\n", ch.Step)
				last = ch.Step
			}
			b.Write(ch.Data)
			after = ch.Seq
		}
		if len(chunks) == 0 {
			break
		}
	}
	c.Data(http.StatusOK, "text/plain; charset=utf-8", []byte(b.String()))
	return nil
}

// jobRunLogsStream follows a run's logs as server-sent events until the run
// ends, the client leaves or the server drains. Errors after the stream has
// started end it silently.
func (s *Server) jobRunLogsStream(c *gin.Context, id, step string) {
	ctx := c.Request.Context()
	c.Header("Content-Type", "text/event-stream")
	c.Header("Cache-Control", "no-cache")
	c.Status(http.StatusOK)
	after := lastEventID(c) // a reconnecting client resumes after the last chunk it saw
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		// Read the status first: chunks written before a final status are
		// all seen by the read that follows it.
		r, err := s.store.GetJobRun(ctx, id)
		if err != nil {
			return
		}
		for {
			chunks, err := s.store.ReadStepLogs(ctx, id, step, after)
			if err != nil {
				return
			}
			for _, ch := range chunks {
				writeEvent(c, strconv.FormatInt(ch.Seq, 10), "log", logEvent{Step: ch.Step, Stream: ch.Stream, Data: string(ch.Data)})
				after = ch.Seq
			}
			if len(chunks) == 0 {
				break
			}
		}
		c.Writer.Flush()
		if run.JobRun.Terminal(r.Status) {
			c.SSEvent("end", gin.H{"status": r.Status})
			c.Writer.Flush()
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-s.drain.done():
			c.SSEvent("end", gin.H{"status": "shutting_down"})
			c.Writer.Flush()
			return
		case <-tick.C:
		}
	}
}
