package api

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gin-contrib/sse"
	"github.com/gin-gonic/gin"

	"github.com/linefactory/linefactory/manifests/run"
	"github.com/linefactory/linefactory/store"
)

// RunSearchStore is what the cross-job and cross-line run lists and the
// line-run log stream need of the store.
type RunSearchStore interface {
	LineRunJobRunIDs(ctx context.Context, lineRunID string) ([]string, error)
	ReadRunsLogs(ctx context.Context, runIDs []string, afterSeq int64) ([]store.RunLogChunk, error)
}

func init() {
	queryDescriptions["job"] = "only runs of this job"
	queryDescriptions["line"] = "only runs of this line"
	queryDescriptions["job_name"] = "the same as job"
	queryDescriptions["line_name"] = "the same as line"
	queryDescriptions["line_run_id"] = "only the job runs of this line run"
	queryDescriptions["since"] = "only runs created at or after this time: RFC 3339 (2026-11-23T10:00:00Z) or a duration before now (90m, 24h, 7d)"
	if op, ok := operations["GET /job-runs/{run_id}/logs"]; ok {
		op.summary = "Step output: text/plain, or Server-Sent Events with follow=true until the run ends; every log event has an id (its sequence number), send it back as Last-Event-ID to resume after it"
		operations["GET /job-runs/{run_id}/logs"] = op
	}
	operations["GET /job-runs"] = opSpec{summary: "List the runs of every job, newest first", success: 200, response: list("JobRun"),
		query: []string{"limit", "offset", "status", "job", "job_name", "line_run_id", "since"}}
	operations["GET /factory/line-runs"] = opSpec{summary: "List the runs of every line, newest first (list items, without transitions and stage outputs)", success: 200,
		response: list("LineRunListItem"), query: []string{"limit", "offset", "status", "line", "line_name", "since"}}
	operations["GET /factory/line-runs/{run_id}/logs"] = opSpec{summary: "Step output of every stage of a line run: text/plain (stage by stage, each step headed " +
		"\"==> stage task/step <==\"), or Server-Sent Events with follow=true until the run ends; every log event has an id, send it back as Last-Event-ID to resume",
		success: 200, query: []string{"follow"}, text: true}
}

// registerRunSearchRoutes adds the run lists across jobs and lines and the
// line-run log stream.
func (s *Server) registerRunSearchRoutes() {
	s.handle(http.MethodGet, "/job-runs", ScopeRead, s.searchJobRuns)
	s.handle(http.MethodGet, "/factory/line-runs", ScopeRead, s.searchLineRuns)
	s.handle(http.MethodGet, "/factory/line-runs/:run_id/logs", ScopeRead, s.lineRunLogs)
}

// runSearch reads the common filters of the run lists of a kind of run.
func (s *Server) runSearch(c *gin.Context, kind run.Kind) (store.RunSearch, error) {
	limit, offset, err := page(c)
	if err != nil {
		return store.RunSearch{}, err
	}
	f := store.RunSearch{Status: run.Status(c.Query("status")), Limit: limit, Offset: offset}
	if f.Status != "" && !kind.Valid(f.Status) {
		var names []string
		for _, st := range kind.Statuses() {
			names = append(names, string(st))
		}
		return f, invalid("enum", "status must be one of "+strings.Join(names, ", "), "query", "status")
	}
	if raw := c.Query("since"); raw != "" {
		since, err := parseSince(raw, s.cfg.Now())
		if err != nil {
			return f, invalid("value_error", err.Error(), "query", "since")
		}
		f.Since = since
	}
	return f, nil
}

// firstQuery is the first non-empty of several query parameters (a name
// and its aliases).
func firstQuery(c *gin.Context, names ...string) string {
	for _, n := range names {
		if v := c.Query(n); v != "" {
			return v
		}
	}
	return ""
}

// parseSince reads an RFC 3339 time, or a duration before now: a Go
// duration ("90m", "24h") or whole days ("7d").
func parseSince(raw string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, raw); err == nil {
		return t, nil
	}
	if days, ok := strings.CutSuffix(raw, "d"); ok {
		if n, err := strconv.Atoi(days); err == nil && n >= 0 {
			return now.Add(-time.Duration(n) * 24 * time.Hour), nil
		}
	}
	if d, err := time.ParseDuration(raw); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("since must be an RFC 3339 time (2026-11-23T10:00:00Z) or a duration before now (90m, 24h, 7d), not %q", raw)
}

func (s *Server) searchJobRuns(c *gin.Context) error {
	f, err := s.runSearch(c, run.JobRun)
	if err != nil {
		return err
	}
	f.Name, f.LineRunID = firstQuery(c, "job", "job_name"), c.Query("line_run_id")
	// The summary shape leaves the timelines out: not read at all.
	if f.WithoutTimeline, err = summaryRequested(c); err != nil {
		return err
	}
	runs, err := s.store.ListJobRunsJSON(c.Request.Context(), f)
	if err != nil {
		return err
	}
	return writeRawRunList(c, runs)
}

func (s *Server) searchLineRuns(c *gin.Context) error {
	f, err := s.runSearch(c, run.LineRun)
	if err != nil {
		return err
	}
	f.Name = firstQuery(c, "line", "line_name")
	runs, err := s.store.ListLineRunsJSON(c.Request.Context(), store.LineRunFilter{LineName: f.Name, Status: f.Status, Since: f.Since,
		Limit: f.Limit, Offset: f.Offset})
	if err != nil {
		return err
	}
	return writeRawRunList(c, runs)
}

// wantsFollow tells a log request that asks for Server-Sent Events.
func wantsFollow(c *gin.Context) (bool, error) {
	follow := strings.Contains(c.GetHeader("Accept"), "text/event-stream")
	if q, ok := c.GetQuery("follow"); ok && q != "" {
		f, err := strconv.ParseBool(q)
		if err != nil {
			return false, invalid("bool_parsing", "follow must be true or false", "query", "follow")
		}
		follow = follow || f
	}
	return follow, nil
}

// lastEventID reads the Last-Event-ID a reconnecting SSE client sends: the
// sequence number of the last log chunk it saw (0 when absent or not ours).
func lastEventID(c *gin.Context) int64 {
	n, err := strconv.ParseInt(strings.TrimSpace(c.GetHeader("Last-Event-ID")), 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// writeEvent writes one Server-Sent Event; id "" sends none.
func writeEvent(c *gin.Context, id, event string, data any) {
	c.Render(-1, sse.Event{Id: id, Event: event, Data: data})
}

// lineLogEvent is one log event of a line run's stream.
type lineLogEvent struct {
	Stage    string `json:"stage"`
	JobRunID string `json:"job_run_id"`
	Step     string `json:"step"`
	Stream   string `json:"stream"`
	Data     string `json:"data"`
}

// lineRunSources tracks the job runs whose logs belong to a line run: the
// visits it lists (carried ones of a retry included) and every job run it
// started (each attempt), with the stage each ran.
type lineRunSources struct {
	s      *Server
	runID  string
	ids    []string
	stages map[string]string
}

func (l *lineRunSources) refresh(ctx context.Context, r store.LineRun) error {
	if l.stages == nil {
		l.stages = map[string]string{}
	}
	add := func(id, stage string) {
		if _, ok := l.stages[id]; ok {
			if stage != "" {
				l.stages[id] = stage
			}
			return
		}
		l.ids = append(l.ids, id)
		l.stages[id] = stage
	}
	for _, st := range r.Stages {
		if st.JobRunID != nil && *st.JobRunID != "" {
			add(*st.JobRunID, st.StageName)
		}
	}
	ids, err := l.s.store.LineRunJobRunIDs(ctx, l.runID)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if _, ok := l.stages[id]; ok {
			continue
		}
		stage := ""
		if jr, err := l.s.store.GetJobRun(ctx, id); err == nil && jr.StageName != nil {
			stage = *jr.StageName
		}
		add(id, stage)
	}
	return nil
}

func (s *Server) lineRunLogs(c *gin.Context) error {
	ctx := c.Request.Context()
	id := c.Param("run_id")
	r, err := s.store.GetLineRun(ctx, id)
	if err != nil {
		return err
	}
	follow, err := wantsFollow(c)
	if err != nil {
		return err
	}
	src := &lineRunSources{s: s, runID: id}
	if !follow {
		if err := src.refresh(ctx, r); err != nil {
			return err
		}
		return s.lineRunLogText(c, src)
	}
	c.Header("Content-Type", "text/event-stream")
	c.Header("Cache-Control", "no-cache")
	c.Status(http.StatusOK)
	after := lastEventID(c)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		// The status is read before the logs: every chunk written before a
		// final status is seen by the reads that follow it.
		lr, err := s.store.GetLineRun(ctx, id)
		if err != nil {
			return nil
		}
		if err := src.refresh(ctx, lr); err != nil {
			return nil
		}
		for {
			chunks, err := s.store.ReadRunsLogs(ctx, src.ids, after)
			if err != nil {
				return nil
			}
			for _, ch := range chunks {
				writeEvent(c, strconv.FormatInt(ch.Seq, 10), "log", lineLogEvent{Stage: src.stages[ch.RunID], JobRunID: ch.RunID,
					Step: ch.Step, Stream: ch.Stream, Data: string(ch.Data)})
				after = ch.Seq
			}
			if len(chunks) == 0 {
				break
			}
		}
		c.Writer.Flush()
		if run.LineRun.Terminal(lr.Status) {
			writeEvent(c, "", "end", gin.H{"status": lr.Status})
			c.Writer.Flush()
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-s.drain.done():
			writeEvent(c, "", "end", gin.H{"status": "shutting_down"})
			c.Writer.Flush()
			return nil
		case <-tick.C:
		}
	}
}

// lineRunLogText answers a line run's logs as text: stage visit by stage
// visit (in the order they started), each step headed by
// "==> <stage> <task>/<step> <==".
func (s *Server) lineRunLogText(c *gin.Context, src *lineRunSources) error {
	ctx := c.Request.Context()
	byRun := map[string][]store.RunLogChunk{}
	var after int64
	for {
		chunks, err := s.store.ReadRunsLogs(ctx, src.ids, after)
		if err != nil {
			return err
		}
		if len(chunks) == 0 {
			break
		}
		for _, ch := range chunks {
			byRun[ch.RunID] = append(byRun[ch.RunID], ch)
			after = ch.Seq
		}
	}
	var b strings.Builder
	for _, rid := range src.ids {
		chunks := byRun[rid]
		// Within a job run, each step's output together, steps in the order
		// they first wrote.
		first := map[string]int64{}
		for _, ch := range chunks {
			if _, ok := first[ch.Step]; !ok {
				first[ch.Step] = ch.Seq
			}
		}
		sort.SliceStable(chunks, func(i, j int) bool { return first[chunks[i].Step] < first[chunks[j].Step] })
		last := ""
		for _, ch := range chunks {
			if ch.Step != last {
				fmt.Fprintf(&b, "==> %s %s <==\n", src.stages[rid], ch.Step)
				last = ch.Step
			}
			b.Write(ch.Data)
		}
	}
	c.Data(http.StatusOK, "text/plain; charset=utf-8", []byte(b.String()))
	return nil
}
