package api

import (
	"net/http"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/gin-gonic/gin"
)

// The OpenAPI 3 document of the API, built from the same route table the
// router uses (a test checks that every route is documented and that API
// responses validate against it).

func str() *openapi3.Schema     { return openapi3.NewStringSchema() }
func strN() *openapi3.Schema    { return openapi3.NewStringSchema().WithNullable() }
func integer() *openapi3.Schema { return openapi3.NewIntegerSchema() }
func intN() *openapi3.Schema    { return openapi3.NewIntegerSchema().WithNullable() }
func boolean() *openapi3.Schema { return openapi3.NewBoolSchema() }
func dt() *openapi3.Schema      { return openapi3.NewDateTimeSchema() }
func dtN() *openapi3.Schema     { return openapi3.NewDateTimeSchema().WithNullable() }
func anyValue() *openapi3.Schema {
	return &openapi3.Schema{Nullable: true}
}
func freeObject() *openapi3.Schema { return openapi3.NewObjectSchema().WithAnyAdditionalProperties() }
func freeObjectN() *openapi3.Schema {
	return openapi3.NewObjectSchema().WithAnyAdditionalProperties().WithNullable()
}
func arr(items *openapi3.Schema) *openapi3.Schema { return openapi3.NewArraySchema().WithItems(items) }
func enum(values ...string) *openapi3.Schema {
	s := str()
	for _, v := range values {
		s.Enum = append(s.Enum, v)
	}
	return s
}

func ref(name string) *openapi3.SchemaRef {
	return openapi3.NewSchemaRef("#/components/schemas/"+name, nil)
}

// obj builds an object schema; property names ending in "!" are required.
func obj(props map[string]*openapi3.Schema, refs map[string]string) *openapi3.Schema {
	s := openapi3.NewObjectSchema()
	var required []string
	add := func(name string, set func(string)) {
		if n, ok := strings.CutSuffix(name, "!"); ok {
			required = append(required, n)
			name = n
		}
		set(name)
	}
	for name, p := range props {
		p := p
		add(name, func(n string) { s.WithProperty(n, p) })
	}
	for name, r := range refs {
		r := r
		add(name, func(n string) { s.WithPropertyRef(n, ref(r)) })
	}
	if len(required) > 0 {
		sortStrings(required)
		s.WithRequired(required)
	}
	return s
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

func nullableRef(name string) *openapi3.Schema {
	return &openapi3.Schema{Nullable: true, AllOf: openapi3.SchemaRefs{ref(name)}}
}

func schemas() openapi3.Schemas {
	jobVersion := obj(map[string]*openapi3.Schema{"id!": str(), "version_number!": integer(), "content_hash!": str(), "deployed_at!": dt()},
		map[string]string{"manifest!": "JobManifest"})
	jobVersionSummary := obj(map[string]*openapi3.Schema{"id!": str(), "version_number!": integer(), "content_hash!": str(), "deployed_at!": dt()}, nil)
	jobListItem := map[string]*openapi3.Schema{"id!": str(), "name!": str(), "latest_version_number!": intN(), "created_at!": dt()}
	job := obj(map[string]*openapi3.Schema{"id!": str(), "name!": str(), "latest_version_number!": intN(), "created_at!": dt(),
		"latest_version!": nullableRef("JobVersion")}, nil)
	lineDeployment := obj(map[string]*openapi3.Schema{"id!": str(), "version_number!": integer(), "content_hash!": str(), "deployed_at!": dt(),
		"input_params": arr(&openapi3.Schema{AllOf: openapi3.SchemaRefs{ref("JobParamDefinition")}})},
		map[string]string{"manifest!": "LineManifest"})
	line := obj(map[string]*openapi3.Schema{"id!": str(), "name!": str(), "latest_version_number!": intN(), "created_at!": dt(),
		"latest_deployment!": nullableRef("LineDeployment")}, nil)
	paramType := enum("string", "integer", "number", "boolean", "array")
	itemsType := enum("string", "integer", "number", "boolean")
	itemsType.Nullable = true
	paramDef := obj(map[string]*openapi3.Schema{"name!": str(), "type!": paramType, "items": itemsType, "required": boolean(),
		"description": strN(), "pattern": strN(), "prefix": strN(), "enum": arr(anyValue()).WithNullable()}, nil)
	kinds := []string{"episodic", "procedural", "declarative", "prompt", "image", "video", "audio"}
	link := obj(map[string]*openapi3.Schema{"link_type!": enum("repository", "tag"), "value!": str()}, nil)
	knowledgeVersion := obj(map[string]*openapi3.Schema{"id!": str(), "identifier": str(), "version_number!": integer(), "type!": enum(kinds...),
		"level!": enum(kinds...), "format!": str(), "body!": str(), "metadata!": freeObject(), "links!": arr(link),
		"content_hash!": str(), "created_at!": dt(), "byte_size": intN()}, nil)
	knowledgeItem := obj(map[string]*openapi3.Schema{"identifier!": str(), "latest_version_number!": integer(), "type!": str(), "created_at!": dt()},
		map[string]string{"latest_version": "KnowledgeVersion"})
	knowledgeRequest := obj(map[string]*openapi3.Schema{"identifier": str(), "type!": enum(kinds...), "level!": enum(kinds...),
		"format!": str(), "body!": str(), "metadata": freeObject(), "links": arr(link)}, nil)
	schedule := obj(map[string]*openapi3.Schema{"cron!": str(), "timezone!": str(), "enabled!": boolean(), "schedule_generation!": integer(), "inputs": freeObject()}, nil)
	scheduleRequest := obj(map[string]*openapi3.Schema{"cron!": str(), "timezone": str(), "enabled": boolean(), "inputs": freeObject()}, nil)
	errorBody := obj(map[string]*openapi3.Schema{"code!": enum(CodeAuthRequired, CodeInvalidRequest, CodeNotFound, CodeValidation,
		"SANDBOX_NOT_FOUND", "SANDBOX_ALREADY_EXISTS", "SANDBOX_INVALID_STATE", "SANDBOX_PROVISIONING_FAILED", "RESOURCE_NOT_FOUND",
		"FILE_NOT_FOUND", "COMMAND_NOT_FOUND", "EXEC_FAILED", "FILE_OPERATION_ERROR", CodeResourceUnavailable, CodeAccessDenied,
		"CACHE_CONFLICT", "BILLING_NOT_ALLOWED", "TENANT_SUSPENDED", CodeRateLimited, "TIMEOUT", "GONE", CodeBadGateway, CodeInternal),
		"message!": str(), "available": intN(), "limit": intN(), "requested": intN(), "resource": strN(), "request_id": strN()}, nil)
	fieldError := obj(map[string]*openapi3.Schema{"loc!": arr(anyValue()), "msg!": str(), "type!": str(), "input": anyValue(), "ctx": freeObject()}, nil)
	validation := obj(map[string]*openapi3.Schema{"detail": arr(fieldError)}, nil)
	token := obj(map[string]*openapi3.Schema{"name!": str(), "scope!": enum(ScopeRead, ScopeWrite, ScopeAdmin), "created_at!": dt(),
		"last_used_at!": dtN(), "token": str()}, nil)
	tokenRequest := obj(map[string]*openapi3.Schema{"name!": str(), "scope": enum(ScopeRead, ScopeWrite, ScopeAdmin)}, nil)
	jobManifest := obj(map[string]*openapi3.Schema{"job!": freeObject(), "run!": freeObject(), "schedule": freeObjectN(),
		"verification": freeObjectN(), "outputs": freeObjectN()}, nil)
	lineManifest := obj(map[string]*openapi3.Schema{"line!": freeObject(), "trigger!": freeObject(), "stages!": arr(freeObject()),
		"transitions": arr(freeObject()), "agent": freeObjectN(), "limits": freeObject()}, nil)
	deployRequest := func(manifest string) *openapi3.Schema {
		return obj(nil, map[string]string{"manifest!": manifest})
	}
	timelineEntry := obj(map[string]*openapi3.Schema{"name!": str(), "action!": str(), "status!": str(), "task_name!": str(),
		"sandbox_name": strN(), "agent_session_id": strN(), "started_at": dtN(), "completed_at": dtN(), "error_message": strN(),
		"error_code": strN(), "failure_class": strN(), "error_details": freeObjectN(), "exit_code": intN(), "compute_command_id": strN()}, nil)
	jobRun := obj(map[string]*openapi3.Schema{"id!": str(), "job_name!": str(), "job_version_id!": str(), "status!": str(),
		"region!": strN(), "run_params!": freeObject(), "result_payload!": freeObjectN(), "step_timeline!": arr(timelineEntry),
		"artifact_refs!": arr(freeObject()), "started_at!": dtN(), "completed_at!": dtN(), "error_message!": strN(), "created_at!": dt(),
		"compute_cost_cents": integer(), "inference_cost_cents": integer(), "total_cost_cents": integer(), "cost_rated_at": dtN(),
		"error_code": strN(), "failure_class": strN(), "error_details": freeObjectN(), "line_run_id": strN(), "stage_name": strN(),
		"workflow_id": str(), "stop_reason": strN()}, nil)
	startRun := obj(map[string]*openapi3.Schema{"params": freeObject(), "version_id": str()}, nil)
	stopRun := obj(map[string]*openapi3.Schema{"reason": strN()}, nil)
	stageSummary := obj(map[string]*openapi3.Schema{"stage_name!": str(), "stage_order!": integer(), "iteration!": integer(), "status!": str(),
		"outcome": strN(), "job_run_id": strN(), "compute_cost_cents": integer(), "inference_cost_cents": integer(), "total_cost_cents": integer(),
		"cost_rated_at": dtN(), "started_at": dtN(), "completed_at": dtN(), "artifact_count": integer()}, nil)
	failureSchema := obj(map[string]*openapi3.Schema{"code": strN(), "domain": enum("platform", "config", "contract", "infra", "agent", "user", "unknown"),
		"error_code": strN(), "failure_class": strN(), "error_message": strN(), "stage_name": strN(), "stage_step": strN(), "task_name": strN(),
		"error_details": freeObjectN()}, nil)
	failureSchema.Nullable = true
	trigger := obj(map[string]*openapi3.Schema{"source!": str(), "provider": strN(), "event_name": strN(), "delivery_id": strN(), "payload": freeObject()}, nil)
	turn := obj(map[string]*openapi3.Schema{"workflow_run_id!": str(), "state!": str(), "started_at": dtN()}, nil)
	lineRun := obj(map[string]*openapi3.Schema{"id!": str(), "line_name!": str(), "status!": str(), "trigger!": trigger, "created_at!": dt(),
		"line_version_id": strN(), "region": strN(), "run_params": freeObject(), "stages": arr(stageSummary), "artifact_count": integer(),
		"artifacts": arr(freeObject()), "compute_cost_cents": integer(), "inference_cost_cents": integer(), "total_cost_cents": integer(),
		"cost_rated_at": dtN(), "error_message": strN(), "failure": failureSchema, "manager_turns": arr(turn), "triggered_by_actor": freeObjectN(),
		"started_at": dtN(), "completed_at": dtN(), "transitions": arr(freeObject()), "stage_outputs": freeObject(), "workflow_id": str(),
		"retry_of": strN(), "stop_reason": strN()}, nil)
	control := obj(map[string]*openapi3.Schema{"action!": enum("select", "retry"), "from_stage": str(), "transition_id": str(), "option": str()}, nil)
	startLine := obj(map[string]*openapi3.Schema{"params": freeObject()}, nil)
	return openapi3.Schemas{
		"LineRun":             lineRun.NewRef(),
		"TriggerPayload":      freeObject().NewRef(),
		"LineRunStartRequest": startLine.NewRef(),
		"ControlRequest":      control.NewRef(),
		"JobRun":              jobRun.NewRef(),
		"JobRunStartRequest":  startRun.NewRef(),
		"StopRequest":         stopRun.NewRef(),
		"ErrorBody":           errorBody.NewRef(),
		"ValidationError":     validation.NewRef(),
		"JobManifest":         jobManifest.NewRef(),
		"LineManifest":        lineManifest.NewRef(),
		"JobVersion":          jobVersion.NewRef(),
		"JobVersionSummary":   jobVersionSummary.NewRef(),
		"JobListItem":         obj(jobListItem, nil).NewRef(),
		"Job":                 job.NewRef(),
		"JobParamDefinition":  paramDef.NewRef(),
		"LineDeployment":      lineDeployment.NewRef(),
		"LineListItem":        obj(jobListItem, nil).NewRef(),
		"Line":                line.NewRef(),
		"KnowledgeVersion":    knowledgeVersion.NewRef(),
		"KnowledgeItem":       knowledgeItem.NewRef(),
		"KnowledgeRequest":    knowledgeRequest.NewRef(),
		"LineSchedule":        schedule.NewRef(),
		"LineScheduleRequest": scheduleRequest.NewRef(),
		"Token":               token.NewRef(),
		"TokenRequest":        tokenRequest.NewRef(),
		"JobDeployRequest":    deployRequest("JobManifest").NewRef(),
		"LineDeployRequest":   deployRequest("LineManifest").NewRef(),
	}
}

// opSpec says what one endpoint answers.
type opSpec struct {
	summary  string
	request  string // schema of the JSON body, "" for none
	toml     bool   // also accepts application/toml
	success  int
	response *openapi3.SchemaRef
	deploy   bool // 422 uses the error body
	query    []string
	noSame   bool // a 201 without the "identical" 200
	text     bool // text/plain and text/event-stream
}

func list(name string) *openapi3.SchemaRef {
	return arr(&openapi3.Schema{AllOf: openapi3.SchemaRefs{ref(name)}}).NewRef()
}

var operations = map[string]opSpec{
	"GET /healthz":      {summary: "Process is up", success: 200, response: freeObject().NewRef()},
	"GET /readyz":       {summary: "Store (and Temporal) reachable", success: 200, response: freeObject().NewRef()},
	"GET /metrics":      {summary: "Prometheus metrics", success: 200},
	"GET /openapi.json": {summary: "This document", success: 200, response: freeObject().NewRef()},

	"POST /jobs/{name}/versions":                            {summary: "Create a job version (201; 200 when identical to the latest)", request: "JobDeployRequest", toml: true, success: 201, response: ref("JobVersion"), deploy: true},
	"GET /jobs/{name}/versions":                             {summary: "List a job's versions, newest first", success: 200, response: list("JobVersionSummary"), query: []string{"limit", "offset"}},
	"GET /jobs/{name}/versions/{version_id}":                {summary: "Get a job version", success: 200, response: ref("JobVersion")},
	"GET /jobs":                                             {summary: "List jobs by name", success: 200, response: list("JobListItem"), query: []string{"limit", "offset"}},
	"GET /jobs/{name}":                                      {summary: "Get a job and its latest version", success: 200, response: ref("Job")},
	"POST /jobs/{name}/runs":                                {summary: "Start a job run (queued)", request: "JobRunStartRequest", success: 201, response: ref("JobRun"), noSame: true},
	"GET /jobs/{name}/runs":                                 {summary: "List a job's runs, newest first", success: 200, response: list("JobRun"), query: []string{"limit", "offset", "status"}},
	"POST /jobs/{name}/runs/{run_id}/stop":                  {summary: "Stop a job run (a finished run is unchanged)", request: "StopRequest", success: 202, response: ref("JobRun")},
	"GET /job-runs/{run_id}":                                {summary: "Get a job run", success: 200, response: ref("JobRun")},
	"GET /job-runs/{run_id}/logs":                           {summary: "Step output: text/plain, or Server-Sent Events with follow=true until the run ends", success: 200, query: []string{"step", "follow"}, text: true},
	"POST /factory/lines/{name}/deploy":                     {summary: "Deploy a line (201; 200 when identical to the latest)", request: "LineDeployRequest", toml: true, success: 201, response: ref("LineDeployment"), deploy: true},
	"GET /factory/lines":                                    {summary: "List lines by name", success: 200, response: list("LineListItem"), query: []string{"limit", "offset"}},
	"POST /factory/lines/{name}/runs":                       {summary: "Start a line run (the manual trigger)", request: "LineRunStartRequest", success: 201, response: ref("LineRun"), noSame: true},
	"GET /factory/lines/{name}/runs":                        {summary: "List a line's runs, newest first", success: 200, response: list("LineRun"), query: []string{"limit", "offset"}},
	"GET /factory/line-runs/{run_id}":                       {summary: "Get a line run with its transitions and stage outputs", success: 200, response: ref("LineRun")},
	"POST /factory/line-runs/{run_id}/stop":                 {summary: "Stop a line run (a finished run is unchanged)", request: "StopRequest", success: 202, response: ref("LineRun")},
	"POST /factory/line-runs/{run_id}/control":              {summary: "Control a line run: select an option, or retry a failed run as a new run", request: "ControlRequest", success: 202, response: ref("LineRun")},
	"POST /factory/webhooks/{path}":                         {summary: "Start a run of every line whose webhook trigger has this path (202; 200 with the earlier runs for a repeated X-Delivery-Id)", request: "TriggerPayload", success: 202, response: list("LineRun")},
	"POST /factory/integrations/{provider}/events":          {summary: "Deliver a provider event to every matching integration trigger (202; 200 for a repeated X-Delivery-Id)", request: "TriggerPayload", success: 202, response: list("LineRun")},
	"GET /factory/lines/{name}":                             {summary: "Get a line and its latest deployment", success: 200, response: ref("Line")},
	"PUT /factory/lines/{name}/schedule":                    {summary: "Create or replace a line's schedule", request: "LineScheduleRequest", success: 200, response: ref("LineSchedule")},
	"GET /factory/lines/{name}/schedule":                    {summary: "Get a line's schedule", success: 200, response: ref("LineSchedule")},
	"DELETE /factory/lines/{name}/schedule":                 {summary: "Delete a line's schedule", success: 204},
	"POST /knowledge":                                       {summary: "Create a knowledge item (version 1)", request: "KnowledgeRequest", success: 201, response: ref("KnowledgeVersion")},
	"POST /knowledge/{identifier}/versions":                 {summary: "Add a knowledge version (201; 200 when identical)", request: "KnowledgeRequest", success: 201, response: ref("KnowledgeVersion")},
	"GET /knowledge":                                        {summary: "List knowledge items", success: 200, response: list("KnowledgeItem"), query: []string{"limit", "offset"}},
	"GET /knowledge/{identifier}":                           {summary: "Get a knowledge item and its latest version", success: 200, response: ref("KnowledgeItem")},
	"GET /knowledge/{identifier}/versions/{version_number}": {summary: "Get a knowledge version", success: 200, response: ref("KnowledgeVersion")},
	"POST /tokens":                                          {summary: "Create an API token (the secret is shown once)", request: "TokenRequest", success: 201, response: ref("Token")},
	"GET /tokens":                                           {summary: "List API tokens", success: 200, response: list("Token")},
	"DELETE /tokens/{name}":                                 {summary: "Delete an API token", success: 204},
}

// openAPIPath turns a gin path (/jobs/:name) into an OpenAPI one (/jobs/{name}).
func openAPIPath(ginPath string) string {
	parts := strings.Split(ginPath, "/")
	for i, p := range parts {
		if strings.HasPrefix(p, ":") || strings.HasPrefix(p, "*") {
			parts[i] = "{" + p[1:] + "}"
		}
	}
	return strings.Join(parts, "/")
}

// OpenAPI returns the document for the server's routes, with its
// references resolved (it is encoded and loaded back).
func (s *Server) OpenAPI() (*openapi3.T, error) {
	data, err := s.buildOpenAPI().MarshalJSON()
	if err != nil {
		return nil, err
	}
	return openapi3.NewLoader().LoadFromData(data)
}

// buildOpenAPI builds the document for the server's routes.
func (s *Server) buildOpenAPI() *openapi3.T {
	doc := &openapi3.T{
		OpenAPI: "3.0.3",
		Info:    &openapi3.Info{Title: "Linefactory API", Version: "1.0.0", Description: "Jobs, lines, runs, schedules and knowledge. See SPEC.md and API.md."},
		Paths:   openapi3.NewPaths(),
		Components: &openapi3.Components{
			Schemas: schemas(),
			SecuritySchemes: openapi3.SecuritySchemes{
				"bearerAuth": &openapi3.SecuritySchemeRef{Value: openapi3.NewJWTSecurityScheme().WithBearerFormat("opaque")},
			},
		},
		Security: openapi3.SecurityRequirements{{"bearerAuth": []string{}}},
	}
	errResp := func(desc string) *openapi3.Response {
		return openapi3.NewResponse().WithDescription(desc).WithJSONSchemaRef(ref("ErrorBody"))
	}
	for _, r := range s.routes {
		path := openAPIPath(r.Path)
		spec, ok := operations[r.Method+" "+path]
		if !ok {
			continue // the completeness test names it
		}
		op := openapi3.NewOperation()
		op.Summary = spec.summary
		op.OperationID = strings.ToLower(r.Method) + strings.NewReplacer("/", "_", "{", "", "}", "", "-", "_", ".", "_").Replace(path)
		if r.Scope == "" {
			op.Security = &openapi3.SecurityRequirements{}
		} else {
			op.Description = "Requires a token with scope " + r.Scope + " or higher."
		}
		for _, seg := range strings.Split(path, "/") {
			if strings.HasPrefix(seg, "{") {
				op.AddParameter(openapi3.NewPathParameter(strings.Trim(seg, "{}")).WithSchema(str()))
			}
		}
		for _, q := range spec.query {
			schema := integer()
			if q != "limit" && q != "offset" {
				schema = str()
			}
			p := openapi3.NewQueryParameter(q).WithSchema(schema)
			op.AddParameter(p)
		}
		if spec.request != "" {
			content := openapi3.NewContentWithJSONSchemaRef(ref(spec.request))
			if spec.toml {
				content["application/toml"] = openapi3.NewMediaType().WithSchema(str())
			}
			op.RequestBody = &openapi3.RequestBodyRef{Value: openapi3.NewRequestBody().WithContent(content)}
		}
		success := openapi3.NewResponse().WithDescription("success")
		switch {
		case r.Path == "/metrics":
			success.WithContent(openapi3.Content{"text/plain": openapi3.NewMediaType().WithSchema(str())})
		case spec.text:
			success.WithContent(openapi3.Content{"text/plain": openapi3.NewMediaType().WithSchema(str()),
				"text/event-stream": openapi3.NewMediaType().WithSchema(str())})
		case spec.response != nil:
			success.WithJSONSchemaRef(spec.response)
		}
		op.AddResponse(spec.success, success)
		if strings.HasPrefix(path, "/factory/webhooks/") || strings.HasPrefix(path, "/factory/integrations/") {
			op.AddResponse(200, openapi3.NewResponse().WithDescription("a repeated delivery: the runs it started before").WithJSONSchemaRef(spec.response))
		}
		if spec.success == 201 && !spec.noSame {
			op.AddResponse(200, openapi3.NewResponse().WithDescription("identical to the latest version: nothing new stored").WithJSONSchemaRef(spec.response))
		}
		if r.Path == "/readyz" {
			op.AddResponse(503, openapi3.NewResponse().WithDescription("not ready").WithJSONSchema(freeObject()))
		}
		if r.Scope != "" {
			op.AddResponse(401, errResp("missing or invalid bearer token (AUTH_REQUIRED)"))
			op.AddResponse(403, errResp("token scope too low (ACCESS_DENIED)"))
			op.AddResponse(404, errResp("not found (NOT_FOUND)"))
			op.AddResponse(409, errResp("state conflict (INVALID_REQUEST)"))
			op.AddResponse(413, errResp("request body too large"))
			op.AddResponse(502, errResp("the workflow engine did not answer (BAD_GATEWAY)"))
			op.AddResponse(503, errResp("no workflow engine (RESOURCE_UNAVAILABLE)"))
			if spec.deploy {
				op.AddResponse(422, errResp("invalid manifest (VALIDATION_ERROR, every problem with its location)"))
			} else {
				op.AddResponse(422, openapi3.NewResponse().WithDescription("invalid input").WithJSONSchemaRef(ref("ValidationError")))
			}
		}
		op.AddResponse(500, errResp("internal error (INTERNAL_ERROR)"))
		doc.AddOperation(path, r.Method, op)
	}
	return doc
}

// openapiCache holds the encoded document, built on first request.
type openapiCache struct {
	once sync.Once
	data []byte
	err  error
}

func (s *Server) openapi(c *gin.Context) error {
	s.doc.once.Do(func() { s.doc.data, s.doc.err = s.buildOpenAPI().MarshalJSON() })
	if s.doc.err != nil {
		return s.doc.err
	}
	c.Data(http.StatusOK, "application/json", s.doc.data)
	return nil
}
