package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/linefactory/linefactory/manifests"
	"github.com/linefactory/linefactory/store"
	"github.com/linefactory/linefactory/workflows"
)

// JobVersionResponse is SPEC's job version; Manifest is omitted in lists.
type JobVersionResponse struct {
	ID            string          `json:"id"`
	VersionNumber int             `json:"version_number"`
	ContentHash   string          `json:"content_hash"`
	DeployedAt    time.Time       `json:"deployed_at"`
	Manifest      json.RawMessage `json:"manifest,omitempty"`
}

// JobListItem is SPEC's job list item.
type JobListItem struct {
	ID                  string    `json:"id"`
	Name                string    `json:"name"`
	LatestVersionNumber *int      `json:"latest_version_number"`
	CreatedAt           time.Time `json:"created_at"`
}

// JobResponse is a job list item with its latest version.
type JobResponse struct {
	JobListItem
	LatestVersion *JobVersionResponse `json:"latest_version"`
}

// LineDeploymentResponse is SPEC's line deployment. InputParams are the
// deployment record's (manifests.LineInputs): the params of the entry job
// version the deploy resolved, and every input the line's bindings read, as
// the jobs they feed declared them then (unpinned jobs may have newer
// versions since).
type LineDeploymentResponse struct {
	ID            string          `json:"id"`
	VersionNumber int             `json:"version_number"`
	ContentHash   string          `json:"content_hash"`
	DeployedAt    time.Time       `json:"deployed_at"`
	Manifest      json.RawMessage `json:"manifest"`
	InputParams   json.RawMessage `json:"input_params"`
}

// LineListItem is one line of GET /factory/lines.
type LineListItem struct {
	ID                  string    `json:"id"`
	Name                string    `json:"name"`
	LatestVersionNumber *int      `json:"latest_version_number"`
	CreatedAt           time.Time `json:"created_at"`
}

// LineResponse is a line with its latest deployment.
type LineResponse struct {
	LineListItem
	LatestDeployment *LineDeploymentResponse `json:"latest_deployment"`
	// LatestVersion repeats LatestDeployment under the name jobs and
	// knowledge items use, so clients can read all three alike.
	LatestVersion *LineDeploymentResponse `json:"latest_version"`
}

func jobVersionResponse(v store.JobVersion, withManifest bool) JobVersionResponse {
	r := JobVersionResponse{ID: v.ID, VersionNumber: v.VersionNumber, ContentHash: v.ContentHash, DeployedAt: v.DeployedAt.UTC()}
	if withManifest {
		r.Manifest = v.Manifest
	}
	return r
}

func lineDeploymentResponse(v store.LineVersion) LineDeploymentResponse {
	params := v.InputParams
	if len(params) == 0 || string(params) == "null" {
		params = json.RawMessage("[]")
	}
	return LineDeploymentResponse{ID: v.ID, VersionNumber: v.VersionNumber, ContentHash: v.ContentHash,
		DeployedAt: v.DeployedAt.UTC(), Manifest: v.Manifest, InputParams: params}
}

// manifestBody returns the manifest of a deploy request and its format: raw
// TOML with Content-Type application/toml, else JSON {"manifest": {...}}
// (whatever the Content-Type says, so curl -d works; the message names a
// Content-Type that is neither).
func manifestBody(c *gin.Context) ([]byte, manifests.Format, error) {
	data, err := readBody(c)
	if err != nil {
		return nil, "", err
	}
	ct := c.GetHeader("Content-Type")
	mt, _, _ := mime.ParseMediaType(ct)
	switch mt {
	case "application/toml", "text/toml", "application/x-toml":
		return data, manifests.FormatTOML, nil
	}
	bad := func(msg string) error {
		if mt != "" && mt != "application/json" && !strings.HasSuffix(mt, "+json") {
			msg += fmt.Sprintf(" (Content-Type %q is neither application/json nor application/toml)", ct)
		}
		return &ManifestInvalid{Problems: manifests.Problems{{Message: msg}}}
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, "", bad("the request body is empty: send JSON {\"manifest\": {...}} or TOML with Content-Type application/toml")
	}
	if le := manifests.CheckWrappedDepth(data); le != nil {
		return nil, "", &ManifestInvalid{Problems: manifests.Problems{le.Problem()}, Limit: le}
	}
	var wrapper map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&wrapper); err != nil {
		reason := err.Error()
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			reason = "got a JSON " + te.Value + ", not an object" // no Go type names
		}
		return nil, "", bad("the body must be JSON {\"manifest\": {...}} or TOML with Content-Type application/toml: " + reason)
	}
	if rest := bytes.TrimSpace(data[dec.InputOffset():]); len(rest) > 0 {
		return nil, "", bad(fmt.Sprintf("unexpected data after the JSON body (at byte %d)", len(data)-len(bytes.TrimLeft(data[dec.InputOffset():], " \t\r\n"))))
	}
	var ps manifests.Problems
	for k := range wrapper {
		if k != "manifest" {
			ps = append(ps, manifests.Problem{Path: k, Message: "unknown key in the request body (only \"manifest\")"})
		}
	}
	raw, ok := wrapper["manifest"]
	if !ok || string(raw) == "null" {
		ps = append(ps, manifests.Problem{Path: "manifest", Message: "is required"})
	}
	if ps != nil {
		ps.Sort()
		return nil, "", &ManifestInvalid{Problems: ps}
	}
	return raw, manifests.FormatJSON, nil
}

// ---------------------------------------------------------------- jobs

// parseJob parses, validates and normalizes a job manifest for a deploy.
func parseJob(data []byte, f manifests.Format, pathName string) (*manifests.JobManifest, error) {
	if le := manifests.CheckSize(data, f); le != nil {
		return nil, &ManifestInvalid{Problems: manifests.Problems{le.Problem()}, Limit: le}
	}
	m, ps := manifests.CheckJob(data, f)
	// The name is checked whatever else is wrong, when the document gives one.
	if name := manifests.PeekName(data, f, "job"); name != "" {
		ps = append(ps, manifests.CheckName("job.name", pathName, name)...)
	}
	if m == nil || len(ps) > 0 {
		ps.Sort()
		var le *manifests.LimitError
		if m != nil {
			le = manifests.CheckJobLimits(m)
		}
		return nil, &ManifestInvalid{Problems: ps, Limit: le}
	}
	manifests.NormalizeJob(m)
	return m, nil
}

func encodeManifest(m any) (json.RawMessage, string, error) {
	hash, err := manifests.ContentHash(m)
	if err != nil {
		return nil, "", err
	}
	raw, err := json.Marshal(m)
	return raw, hash, err
}

func (s *Server) createJobVersion(c *gin.Context) error {
	name := c.Param("name")
	data, format, err := manifestBody(c)
	if err != nil {
		return err
	}
	m, err := parseJob(data, format, name)
	if err != nil {
		return err
	}
	if ps, err := s.checkJobAgents(c.Request.Context(), m); err != nil {
		return err
	} else if len(ps) > 0 {
		ps.Sort()
		return &ManifestInvalid{Problems: ps}
	}
	raw, hash, err := encodeManifest(m)
	if err != nil {
		return err
	}
	v, created, err := s.store.DeployJobVersion(c.Request.Context(), name, raw, hash)
	if err != nil {
		return err
	}
	if err := s.syncJobSchedule(c.Request.Context(), name, v.ID, m.Schedule); err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	c.JSON(status, jobVersionResponse(v, true))
	return nil
}

// syncJobSchedule keeps a job's Temporal Schedule in step with a deploy: a
// [schedule] of the deployed version (the job's latest, also on an identical
// redeploy, which repairs a schedule the engine did not take the first time)
// is made or updated for that version, paused when disabled; a version
// without one drops it.
func (s *Server) syncJobSchedule(ctx context.Context, name, versionID string, sc *manifests.ScheduleSection) error {
	if s.cfg.Runs == nil {
		return nil
	}
	if sc == nil {
		if err := s.cfg.Runs.DeleteJobSchedule(ctx, name); err != nil {
			return httpError(http.StatusBadGateway, CodeBadGateway, "the job was deployed but the workflow engine did not drop its schedule: %v", err)
		}
		return nil
	}
	js := workflows.JobSchedule{JobName: name, JobVersionID: versionID, Cron: sc.Cron, Timezone: sc.Timezone, Enabled: sc.Enabled == nil || *sc.Enabled}
	if js.Timezone == "" {
		js.Timezone = "UTC"
	}
	if err := s.cfg.Runs.UpsertJobSchedule(ctx, js); err != nil {
		return httpError(http.StatusBadGateway, CodeBadGateway, "the job was deployed but the workflow engine did not take its schedule: %v", err)
	}
	return nil
}

func (s *Server) listJobVersions(c *gin.Context) error {
	limit, offset, err := page(c)
	if err != nil {
		return err
	}
	vs, err := s.store.ListJobVersions(c.Request.Context(), c.Param("name"), limit, offset)
	if err != nil {
		return err
	}
	out := make([]JobVersionResponse, len(vs))
	for i, v := range vs {
		out[i] = jobVersionResponse(v, false)
	}
	c.JSON(http.StatusOK, out)
	return nil
}

func (s *Server) getJobVersion(c *gin.Context) error {
	v, err := s.store.GetJobVersion(c.Request.Context(), c.Param("name"), c.Param("version_id"))
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, jobVersionResponse(v, true))
	return nil
}

func (s *Server) listJobs(c *gin.Context) error {
	limit, offset, err := page(c)
	if err != nil {
		return err
	}
	jobs, err := s.store.ListJobs(c.Request.Context(), limit, offset)
	if err != nil {
		return err
	}
	out := make([]JobListItem, len(jobs))
	for i, j := range jobs {
		out[i] = JobListItem{ID: j.ID, Name: j.Name, LatestVersionNumber: j.LatestVersionNumber, CreatedAt: j.CreatedAt.UTC()}
	}
	c.JSON(http.StatusOK, out)
	return nil
}

func (s *Server) getJob(c *gin.Context) error {
	ctx := c.Request.Context()
	j, err := s.store.GetJob(ctx, c.Param("name"))
	if err != nil {
		return err
	}
	out := JobResponse{JobListItem: JobListItem{ID: j.ID, Name: j.Name, LatestVersionNumber: j.LatestVersionNumber, CreatedAt: j.CreatedAt.UTC()}}
	v, err := s.store.LatestJobVersion(ctx, j.Name)
	switch {
	case err == nil:
		r := jobVersionResponse(v, true)
		out.LatestVersion = &r
	case !errors.Is(err, store.ErrNotFound):
		return err
	}
	c.JSON(http.StatusOK, out)
	return nil
}

// ---------------------------------------------------------------- lines

func (s *Server) deployLine(c *gin.Context) error {
	ctx := c.Request.Context()
	name := c.Param("name")
	data, format, err := manifestBody(c)
	if err != nil {
		return err
	}
	if le := manifests.CheckSize(data, format); le != nil {
		return &ManifestInvalid{Problems: manifests.Problems{le.Problem()}, Limit: le}
	}
	m, base := manifests.CheckLine(data, format)
	if m == nil {
		return &ManifestInvalid{Problems: base}
	}
	inputs, ps, err := s.checkLineDeployment(ctx, name, m)
	if err != nil {
		return err
	}
	if ps = manifests.MergeProblems(base, ps); len(ps) > 0 {
		ps.Sort()
		return &ManifestInvalid{Problems: ps}
	}
	manifests.NormalizeLine(m)
	params, err := json.Marshal(manifests.InputDefinitions(inputs))
	if err != nil {
		return err
	}
	raw, hash, err := encodeManifest(m)
	if err != nil {
		return err
	}
	prevTrigger, err := s.latestTrigger(ctx, name)
	if err != nil {
		return err
	}
	v, created, err := s.store.DeployLineVersion(ctx, name, raw, params, hash)
	if err != nil {
		return err
	}
	if err := s.syncTriggerSchedule(ctx, name, m.Trigger, prevTrigger, created); err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	c.JSON(status, lineDeploymentResponse(v))
	return nil
}

// checkLineDeployment checks a decoded line manifest deployed as name
// against the deployed jobs: its name, schedule, stage jobs, bindings,
// agents and inputs. It returns the line's inputs and the problems found.
func (s *Server) checkLineDeployment(ctx context.Context, name string, m *manifests.LineManifest) (inputs []manifests.LineInput, ps manifests.Problems, err error) {
	// The checks below see what of the manifest could be decoded; what they
	// find at or under a location already reported is left out (base).
	ps = append(ps, manifests.CheckName("line.name", name, m.Line.Name)...)
	if m.Trigger.Type == manifests.TriggerSchedule && len(m.Trigger.Cron) > maxCronLen {
		ps = append(ps, manifests.Problem{Path: "trigger.cron", Message: fmt.Sprintf("is longer than %d characters", maxCronLen)})
	}
	var lookupErr error
	ps = append(ps, manifests.CheckLineJobs(m, func(job, versionID string) (bool, bool) {
		if _, err := s.store.GetJob(ctx, job); err != nil {
			if !errors.Is(err, store.ErrNotFound) {
				lookupErr = err
			}
			return false, false
		}
		if versionID == "" {
			return true, true
		}
		_, err := s.store.GetJobVersion(ctx, job, versionID)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			lookupErr = err
		}
		return true, err == nil
	})...)
	if lookupErr != nil {
		return nil, nil, lookupErr
	}
	// The bindings and the schedule's inputs are checked against the jobs
	// the stages resolve to now (stages whose job is unknown are skipped:
	// CheckLineJobs reported them).
	jobs, jps, err := s.loadStageJobs(ctx, m)
	if err != nil {
		return nil, nil, err
	}
	ps = append(ps, jps...)
	ps = append(ps, manifests.CheckLineBindings(m, jobs)...)
	aps, err := s.checkLineAgents(ctx, m, jobs)
	if err != nil {
		return nil, nil, err
	}
	ps = append(ps, aps...)
	var ips manifests.Problems
	inputs, ips = manifests.LineInputs(m, jobs)
	ps = append(ps, ips...)
	if m.Trigger.Type == manifests.TriggerSchedule {
		_, sps := manifests.ApplyLineParams(inputs, m.Trigger.Inputs)
		ps = append(ps, relocate(sps, "params", "trigger.inputs")...)
	}
	return inputs, ps, nil
}

// latestTrigger returns the trigger type of a line's latest deployment, ""
// when it has none.
func (s *Server) latestTrigger(ctx context.Context, name string) (string, error) {
	v, err := s.store.LatestLineVersion(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	var m struct {
		Trigger struct {
			Type string `json:"type"`
		} `json:"trigger"`
	}
	if err := json.Unmarshal(v.Manifest, &m); err != nil {
		return "", fmt.Errorf("decode line %s version %d: %w", name, v.VersionNumber, err)
	}
	return m.Trigger.Type, nil
}

// syncTriggerSchedule keeps a line's schedule in step with a deploy: a
// schedule trigger is the line's schedule, and a new version whose trigger is
// no longer a schedule drops the schedule the previous one made. It runs on
// every deploy, so an identical redeploy repairs a schedule the engine did
// not take the first time. An identical redeploy keeps a stored schedule
// (changed since by PUT, e.g. paused) and only hands it to the engine again;
// the store does not bump the generation of an unchanged schedule. Lines
// whose trigger is not a schedule keep their PUT-made schedules.
func (s *Server) syncTriggerSchedule(ctx context.Context, name string, t manifests.Trigger, prevTrigger string, created bool) error {
	if t.Type != manifests.TriggerSchedule {
		if !created || prevTrigger != manifests.TriggerSchedule {
			return nil
		}
		err := s.store.DeleteLineSchedule(ctx, name)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		if s.cfg.Runs != nil {
			if err := s.cfg.Runs.DeleteSchedule(ctx, name); err != nil {
				return httpError(http.StatusBadGateway, CodeBadGateway, "the line was deployed but the workflow engine did not drop its schedule: %v", err)
			}
		}
		return nil
	}
	sc := store.LineSchedule{LineName: name, Cron: t.Cron, Timezone: t.Timezone, Enabled: true, Inputs: t.Inputs}
	if !created {
		cur, err := s.store.GetLineSchedule(ctx, name)
		switch {
		case err == nil:
			sc = cur
		case !errors.Is(err, store.ErrNotFound):
			return err
		}
	}
	if sc.Inputs == nil {
		sc.Inputs = map[string]any{}
	}
	_, err := s.saveSchedule(ctx, sc)
	return err
}

func lineListItem(l store.Line) LineListItem {
	return LineListItem{ID: l.ID, Name: l.Name, LatestVersionNumber: l.LatestVersionNumber, CreatedAt: l.CreatedAt.UTC()}
}

func (s *Server) listLines(c *gin.Context) error {
	limit, offset, err := page(c)
	if err != nil {
		return err
	}
	lines, err := s.store.ListLines(c.Request.Context(), limit, offset)
	if err != nil {
		return err
	}
	out := make([]LineListItem, len(lines))
	for i, l := range lines {
		out[i] = lineListItem(l)
	}
	c.JSON(http.StatusOK, out)
	return nil
}

func (s *Server) getLine(c *gin.Context) error {
	ctx := c.Request.Context()
	l, err := s.store.GetLine(ctx, c.Param("name"))
	if err != nil {
		return err
	}
	out := LineResponse{LineListItem: lineListItem(l)}
	v, err := s.store.LatestLineVersion(ctx, l.Name)
	switch {
	case err == nil:
		d := lineDeploymentResponse(v)
		out.LatestDeployment = &d
		out.LatestVersion = &d
	case !errors.Is(err, store.ErrNotFound):
		return err
	}
	c.JSON(http.StatusOK, out)
	return nil
}
