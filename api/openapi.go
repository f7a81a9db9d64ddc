package api

import (
	"maps"
	"net/http"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/gin-gonic/gin"

	"github.com/linefactory/linefactory/manifests/run"
)

// The OpenAPI 3 document of the API, built from the same route table the
// router uses (a test checks that every route is documented and that API
// responses validate against it).

func str() *openapi3.Schema     { return openapi3.NewStringSchema() }
func strN() *openapi3.Schema    { return openapi3.NewStringSchema().WithNullable() }
func integer() *openapi3.Schema { return openapi3.NewIntegerSchema() }
func intN() *openapi3.Schema    { return openapi3.NewIntegerSchema().WithNullable() }

// queryDescriptions explain the query parameters whose meaning is not
// obvious from their name.
var queryDescriptions = map[string]string{
	"limit":  "page size, 1..200",
	"offset": "items to skip, >= 0",
	"status": "only runs with this status",
	"step":   "only this step: task/step, or a bare step name when one task has it (an ambiguous name is 422)",
	"follow": "true: Server-Sent Events until the run ends (also with Accept: text/event-stream)",
}

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

// enumOf is the schema of a string enum of typed values.
func enumOf[T ~string](values []T) *openapi3.Schema {
	s := str()
	for _, v := range values {
		s.Enum = append(s.Enum, string(v))
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

// schemas are all component schemas of the API document.
func schemas() openapi3.Schemas {
	out := openapi3.Schemas{}
	for _, part := range []openapi3.Schemas{definitionSchemas(), knowledgeSchemas(), runSchemas(), accessSchemas(), manifestSchemas(), agentSchemas()} {
		for name, sc := range part {
			out[name] = sc
		}
	}
	return out
}

// definitionSchemas are the schemas of jobs, lines, their versions and
// deployments.
func definitionSchemas() openapi3.Schemas {
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
		"latest_deployment!": nullableRef("LineDeployment"), "latest_version!": nullableRef("LineDeployment")}, nil)
	paramType := enum("string", "integer", "number", "boolean", "array")
	itemsType := enum("string", "integer", "number", "boolean")
	itemsType.Nullable = true
	paramDef := obj(map[string]*openapi3.Schema{"name!": str(), "type!": paramType, "items": itemsType, "required": boolean(),
		"description": strN(), "pattern": strN(), "prefix": strN(), "enum": arr(anyValue()).WithNullable()}, nil)
	deployRequest := func(manifest string) *openapi3.Schema {
		return obj(nil, map[string]string{"manifest!": manifest})
	}
	schedule := obj(map[string]*openapi3.Schema{"cron!": str(), "timezone!": str(), "enabled!": boolean(), "schedule_generation!": integer(), "inputs": freeObject()}, nil)
	scheduleRequest := obj(map[string]*openapi3.Schema{"cron!": str(), "timezone": str(), "enabled": boolean(), "inputs": freeObject()}, nil)
	return openapi3.Schemas{
		"JobVersion":          jobVersion.NewRef(),
		"JobVersionSummary":   jobVersionSummary.NewRef(),
		"JobListItem":         obj(jobListItem, nil).NewRef(),
		"Job":                 job.NewRef(),
		"JobParamDefinition":  paramDef.NewRef(),
		"LineDeployment":      lineDeployment.NewRef(),
		"LineListItem":        obj(jobListItem, nil).NewRef(),
		"Line":                line.NewRef(),
		"LineSchedule":        schedule.NewRef(),
		"LineScheduleRequest": scheduleRequest.NewRef(),
		"JobDeployRequest":    deployRequest("JobManifest").NewRef(),
		"LineDeployRequest":   deployRequest("LineManifestInput").NewRef(),
	}
}

// knowledgeSchemas are the schemas of knowledge items.
func knowledgeSchemas() openapi3.Schemas {
	kinds := []string{"episodic", "procedural", "declarative", "prompt", "image", "video", "audio"}
	link := obj(map[string]*openapi3.Schema{"link_type!": enum("repository", "tag"), "value!": str()}, nil)
	knowledgeVersion := obj(map[string]*openapi3.Schema{"id!": str(), "identifier": str(), "version_number!": integer(), "type!": enum(kinds...),
		"level!": enum(kinds...), "format!": str(), "body!": str(), "metadata!": freeObject(), "links!": arr(link),
		"content_hash!": str(), "created_at!": dt(), "byte_size": intN()}, nil)
	knowledgeItem := obj(map[string]*openapi3.Schema{"identifier!": str(), "latest_version_number!": integer(), "type!": str(), "created_at!": dt()},
		map[string]string{"latest_version": "KnowledgeVersion"})
	knowledgeRequest := obj(map[string]*openapi3.Schema{"identifier": str(), "type!": enum(kinds...), "level!": enum(kinds...),
		"format!": str(), "body!": str(), "metadata": freeObject(), "links": arr(link)}, nil)
	return openapi3.Schemas{
		"KnowledgeVersion": knowledgeVersion.NewRef(),
		"KnowledgeItem":    knowledgeItem.NewRef(),
		"KnowledgeRequest": knowledgeRequest.NewRef(),
	}
}

// runSchemas are the schemas of job runs and line runs and their requests.
// Each run schema describes its response type in runviews.go member by
// member (TestRunSchemasAreTheResponseTypes): a pointer member is nullable,
// an omitempty one is absent rather than null.
func runSchemas() openapi3.Schemas {
	jobRun := jobRunSchema()
	startRun := obj(map[string]*openapi3.Schema{"params": freeObject(), "version_id": str()}, nil)
	stopRun := obj(map[string]*openapi3.Schema{"reason": strN()}, nil)
	control := obj(map[string]*openapi3.Schema{"action!": enum("select", "retry"), "from_stage": str(), "transition_id": str(), "option": str(), "reason": str()}, nil)
	startLine := obj(map[string]*openapi3.Schema{"params": freeObject()}, nil)
	source := map[string]*openapi3.Schema{"source!": str(), "provider": strN(), "event_name": strN(), "delivery_id": strN()}
	trigger := obj(with(source, map[string]*openapi3.Schema{"payload": freeObject()}), nil)
	transition := obj(map[string]*openapi3.Schema{"id!": str(), "from!": str(), "to!": str(), "option": str(), "iteration": integer(),
		"taken_at": dt(), "reason": str(), "decided_by": str(), "decided_at": dt(), "router_error": str()}, nil)
	lineRun := obj(with(lineRunFieldSchemas(), map[string]*openapi3.Schema{"trigger!": trigger, "transitions": arr(transition),
		"stage_outputs": openapi3.NewObjectSchema().WithAdditionalProperties(freeObject()), "workflow_id": str(), "retry_of": str(), "stop_reason": str()}), nil)
	return openapi3.Schemas{
		"LineRun":             lineRun.NewRef(),
		"LineRunListItem":     obj(with(lineRunFieldSchemas(), map[string]*openapi3.Schema{"trigger!": trigger}), nil).NewRef(),
		"LineRunSummary":      obj(with(lineRunFieldSchemas(), map[string]*openapi3.Schema{"trigger!": obj(source, nil)}), nil).NewRef(),
		"TriggerPayload":      freeObject().NewRef(),
		"LineRunStartRequest": startLine.NewRef(),
		"ControlRequest":      control.NewRef(),
		"JobRun":              jobRun.NewRef(),
		"JobRunSummary":       summarySchema(jobRun).NewRef(),
		"JobRunStartRequest":  startRun.NewRef(),
		"StopRequest":         stopRun.NewRef(),
	}
}

// with is props and more in one new map.
func with(props, more map[string]*openapi3.Schema) map[string]*openapi3.Schema {
	out := make(map[string]*openapi3.Schema, len(props)+len(more))
	maps.Copy(out, props)
	maps.Copy(out, more)
	return out
}

// jobRunSchema is the schema of JobRunResponse.
func jobRunSchema() *openapi3.Schema {
	usageLine := obj(map[string]*openapi3.Schema{"model!": str(), "input_tokens!": integer(), "output_tokens!": integer()}, nil)
	knowledgeRef := obj(map[string]*openapi3.Schema{"slug!": str(), "version_id!": str(), "version_number!": integer(), "content_hash!": str()}, nil)
	timelineEntry := obj(map[string]*openapi3.Schema{"name!": str(), "action!": str(), "status!": str(), "task_name!": str(),
		"sandbox_name": strN(), "agent_session_id": strN(), "started_at": dtN(), "completed_at": dtN(), "error_message": strN(),
		"error_code": strN(), "failure_class": strN(), "error_details": freeObjectN(), "exit_code": intN(), "compute_command_id": strN(),
		"inference_cost_cents": integer(), "usage": arr(usageLine),
		"attempt": integer(), "attempts": arr(obj(map[string]*openapi3.Schema{"attempt!": integer(), "started_at!": dt()}, nil))}, nil)
	gatewayUsage := obj(map[string]*openapi3.Schema{"requests!": integer(), "input_tokens!": integer(), "output_tokens!": integer(),
		"micro_cents!": integer(), "unpriced_models": arr(str())}, nil)
	gatewayUsage.Description = "what the run's steps drew through the inference gateway; absent when they drew nothing"
	return obj(map[string]*openapi3.Schema{"id!": str(), "job_name!": str(), "job_version_id!": str(), "status!": str(),
		"region!": strN(), "run_params!": freeObject(), "result_payload!": freeObjectN(), "step_timeline!": arr(timelineEntry),
		"artifact_refs!": arr(freeObject()), "started_at!": dtN(), "completed_at!": dtN(), "error_message!": strN(), "created_at!": dt(),
		"compute_cost_cents": integer(), "inference_cost_cents": integer(), "total_cost_cents": integer(), "cost_rated_at": dtN(),
		"error_code": strN(), "failure_class": strN(), "error_details": freeObjectN(), "line_run_id": str(), "stage_name": str(),
		"workflow_id": str(), "stop_reason": str(), "knowledge_versions": arr(knowledgeRef), "gateway_usage": gatewayUsage}, nil)
}

// lineRunFieldSchemas are the members every shape of a line run has
// (LineRunFields), but its trigger.
func lineRunFieldSchemas() map[string]*openapi3.Schema {
	stageVisit := obj(map[string]*openapi3.Schema{"stage_name!": str(), "stage_order!": integer(), "iteration!": integer(), "status!": str(),
		"outcome": strN(), "job_run_id": strN(), "compute_cost_cents": integer(), "inference_cost_cents": integer(), "total_cost_cents": integer(),
		"cost_rated_at": dtN(), "started_at": dtN(), "completed_at": dtN(), "artifact_count": integer(),
		"carried": boolean()}, nil)
	failure := obj(map[string]*openapi3.Schema{"code": strN(), "domain": enumOf(run.Domains()),
		"error_code": strN(), "failure_class": strN(), "error_message": strN(), "stage_name": strN(), "stage_step": strN(), "task_name": strN(),
		"error_details": freeObjectN()}, nil).WithNullable()
	turn := obj(map[string]*openapi3.Schema{"workflow_run_id!": str(), "state!": str(), "started_at": dtN()}, nil)
	instructions := obj(map[string]*openapi3.Schema{"slug!": str(), "version_id!": str(), "version_number!": integer(), "content_hash!": str(),
		"use": described(str(), "agent.instructions or transitions.<id>.instructions")}, nil)
	option := obj(map[string]*openapi3.Schema{"name!": str(), "label": strN(), "to!": str()}, nil)
	waiting := described(obj(map[string]*openapi3.Schema{"transition_id!": str(), "from!": str(), "options!": arr(option).WithNullable(),
		"since!": dt(), "expires_at!": dt(), "router_error": strN()}, nil).WithNullable(), "the agentic transition waiting for a select; null when none")
	routerCall := obj(map[string]*openapi3.Schema{"transition_id!": str(), "iteration!": integer(), "model!": str(), "input_tokens!": integer(),
		"output_tokens!": integer(), "micro_cents!": integer(), "unpriced": boolean(), "option": str(), "error": str(), "at!": dt()}, nil)
	fields := map[string]*openapi3.Schema{"id!": str(), "line_name!": str(), "status!": str(), "created_at!": dt(),
		"line_version_id": strN(), "region": strN(), "run_params": freeObject(), "stages": arr(stageVisit), "artifact_count": integer(),
		"artifacts": arr(freeObject()), "compute_cost_cents": integer(), "inference_cost_cents": integer(), "total_cost_cents": integer(),
		"cost_rated_at": dtN(), "error_message": strN(), "failure": failure, "manager_turns": arr(turn), "triggered_by_actor": freeObjectN(),
		"started_at": dtN(), "completed_at": dtN(), "knowledge_versions": arr(instructions),
		"router_calls": arr(routerCall), "router_cost_cents": integer()}
	fields[string(run.Waiting)] = waiting // the member is named after the status it goes with
	return fields
}

// accessSchemas are the schemas of errors and tokens.
func accessSchemas() openapi3.Schemas {
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
	return openapi3.Schemas{
		"ErrorBody":       errorBody.NewRef(),
		"ValidationError": validation.NewRef(),
		"Token":           token.NewRef(),
		"TokenRequest":    tokenRequest.NewRef(),
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
	"GET /factory/lines/{name}/runs":                        {summary: "List a line's runs, newest first", success: 200, response: list("LineRunListItem"), query: []string{"limit", "offset"}},
	"GET /factory/line-runs/{run_id}":                       {summary: "Get a line run with its transitions and stage outputs", success: 200, response: ref("LineRun")},
	"POST /factory/line-runs/{run_id}/stop":                 {summary: "Stop a line run (a finished run is unchanged)", request: "StopRequest", success: 202, response: ref("LineRun")},
	"POST /factory/line-runs/{run_id}/control":              {summary: "Control a line run: select an option, or retry a failed run as a new run", request: "ControlRequest", success: 202, response: ref("LineRun")},
	"POST /factory/webhooks/{path}":                         {summary: "Start a run of every line whose webhook trigger has this path (202; 200 with the earlier runs for a repeated X-Delivery-Id)", request: "TriggerPayload", success: 202, response: list("LineRunListItem")},
	"POST /factory/integrations/{provider}/events":          {summary: "Deliver a provider event to every matching integration trigger (202; 200 for a repeated X-Delivery-Id)", request: "TriggerPayload", success: 202, response: list("LineRunListItem")},
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
	"GET /inference/models":                                 {summary: "The harnesses, models, efforts and prices of the server configuration file, and its router", success: 200, response: ref("InferenceModels")},
	// The inference gateway: a step's SVC_INFERENCE_TOKEN as the bearer, not an API token.
	"POST /inference/v1/chat/completions": {summary: "Inference gateway: an OpenAI-compatible chat completion forwarded to [inference] (streams included), metered on the calling run; bearer = the run's SVC_INFERENCE_TOKEN", request: "TriggerPayload", success: 200, response: freeObject().NewRef()},
	"GET /inference/v1/models":            {summary: "Inference gateway: the models of [inference]; bearer = a running run's SVC_INFERENCE_TOKEN", success: 200, response: freeObject().NewRef()},
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
	for _, r := range s.routes {
		path := openAPIPath(r.Path)
		head := r.Method == http.MethodHead
		key := r.Method + " " + path
		if head {
			key = http.MethodGet + " " + path // HEAD answers as GET, without a body
		}
		spec, ok := operations[key]
		if !ok {
			continue // the completeness test names it
		}
		doc.AddOperation(path, r.Method, routeOperation(r, path, head, spec))
	}
	return doc
}

// routeOperation describes one route: its parameters, request body and
// responses.
func routeOperation(r Route, path string, head bool, spec opSpec) *openapi3.Operation {
	op := openapi3.NewOperation()
	op.Summary = spec.summary
	if head {
		op.Summary += " (headers only)"
	}
	op.OperationID = strings.ToLower(r.Method) + strings.NewReplacer("/", "_", "{", "", "}", "", "-", "_", ".", "_").Replace(path)
	if r.Scope == "" {
		op.Security = &openapi3.SecurityRequirements{}
	} else {
		op.Description = "Requires a token with scope " + r.Scope + " or higher."
	}
	addParameters(op, path, spec)
	if spec.request != "" {
		content := openapi3.NewContentWithJSONSchemaRef(ref(spec.request))
		if spec.toml {
			content["application/toml"] = openapi3.NewMediaType().WithSchema(str())
		}
		op.RequestBody = &openapi3.RequestBodyRef{Value: openapi3.NewRequestBody().WithContent(content)}
	}
	addSuccessResponses(op, r, path, head, spec)
	addErrorResponses(op, r, path, spec)
	return op
}

// addParameters adds a route's path and query parameters.
func addParameters(op *openapi3.Operation, path string, spec opSpec) {
	for _, seg := range strings.Split(path, "/") {
		if strings.HasPrefix(seg, "{") {
			op.AddParameter(openapi3.NewPathParameter(strings.Trim(seg, "{}")).WithSchema(str()))
		}
	}
	for _, q := range spec.query {
		var schema *openapi3.Schema
		switch q {
		case "limit":
			schema = integer().WithMin(1).WithMax(MaxLimit).WithDefault(DefaultLimit)
		case "offset":
			schema = integer().WithMin(0).WithDefault(0)
		default:
			schema = str()
		}
		p := openapi3.NewQueryParameter(q).WithSchema(schema)
		p.Description = queryDescriptions[q]
		op.AddParameter(p)
	}
}

// addSuccessResponses adds the answers of a route that did its work (and
// /readyz's "not ready").
func addSuccessResponses(op *openapi3.Operation, r Route, path string, head bool, spec opSpec) {
	success := openapi3.NewResponse().WithDescription("success")
	switch {
	case head:
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
		notReady := openapi3.NewResponse().WithDescription("not ready")
		if !head {
			notReady.WithJSONSchema(freeObject())
		}
		op.AddResponse(503, notReady)
	}
}

func errResp(desc string) *openapi3.Response {
	return openapi3.NewResponse().WithDescription(desc).WithJSONSchemaRef(ref("ErrorBody"))
}

// addErrorResponses adds the error answers: those of the inference
// gateway, of an authenticated route, and the internal error every route
// may answer.
func addErrorResponses(op *openapi3.Operation, r Route, path string, spec opSpec) {
	if strings.HasPrefix(path, GatewayBase) {
		op.Description = "Authenticated by a run's SVC_INFERENCE_TOKEN (valid while the run runs), not by an API token; other statuses are the upstream's."
		op.AddResponse(401, errResp("missing or invalid inference token, or its run has ended (AUTH_REQUIRED)"))
		op.AddResponse(413, errResp("request body too large"))
		op.AddResponse(422, openapi3.NewResponse().WithDescription("the body is not a JSON object").WithJSONSchemaRef(ref("ValidationError")))
		op.AddResponse(502, errResp("the inference endpoint did not answer (BAD_GATEWAY)"))
		op.AddResponse(503, errResp("no [inference] configured (RESOURCE_UNAVAILABLE)"))
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

// ---------------------------------------------------------------- manifests

// closed is obj that allows no properties beyond the listed ones (unknown
// manifest keys are errors).
func closed(props map[string]*openapi3.Schema, refs map[string]string) *openapi3.Schema {
	return obj(props, refs).WithoutAdditionalProperties()
}

func listOf(name string) *openapi3.Schema {
	s := openapi3.NewArraySchema()
	s.Items = ref(name)
	return s
}

func mapOf(name string) *openapi3.Schema {
	s := openapi3.NewObjectSchema()
	s.AdditionalProperties = openapi3.AdditionalProperties{Schema: ref(name)}
	return s
}

func nullable(s *openapi3.Schema) *openapi3.Schema { return s.WithNullable() }

func described(s *openapi3.Schema, desc string) *openapi3.Schema {
	s.Description = desc
	return s
}

// union is a oneOf of component schemas told apart by the discriminator
// property prop; mapping maps each discriminator value to its component.
func union(prop string, mapping map[string]string) *openapi3.Schema {
	s := &openapi3.Schema{Discriminator: &openapi3.Discriminator{PropertyName: prop, Mapping: map[string]openapi3.MappingRef{}}}
	seen := map[string]bool{}
	var names []string
	for value, name := range mapping {
		s.Discriminator.Mapping[value] = openapi3.MappingRef{Ref: "#/components/schemas/" + name}
		if !seen[name] {
			seen[name] = true
			names = append(names, name)
		}
	}
	sortStrings(names)
	for _, n := range names {
		s.OneOf = append(s.OneOf, ref(n))
	}
	return s
}

// manifestSchemas describes job and line manifests as SPEC does: the
// discriminated unions are oneOf with a discriminator.
func manifestSchemas() openapi3.Schemas {
	s := openapi3.Schemas{}
	add := func(name string, schema *openapi3.Schema) { s[name] = schema.NewRef() }
	jobManifestSchemas(add)
	sandboxSchemas(add)
	lineManifestSchemas(add)
	transitionSchemas(add)
	return s
}

func minInt(min float64) *openapi3.Schema { return intN().WithMin(min) }
func strList() *openapi3.Schema           { return nullable(arr(str())) }

// jobManifestSchemas are the schemas of a job manifest but its sandbox.
func jobManifestSchemas(add func(name string, schema *openapi3.Schema)) {
	paramType := enum("string", "integer", "number", "boolean", "array")
	itemsType := func() *openapi3.Schema { return nullable(enum("string", "integer", "number", "boolean")) }
	harnesses := []string{"agent_a", "agent_b", "agent_c", "agent_d"}

	// bindings of instructions and prompts
	add("Binding", union("type", map[string]string{"knowledge": "KnowledgeBinding", "literal": "LiteralBinding"}))
	add("KnowledgeBinding", closed(map[string]*openapi3.Schema{"type!": enum("knowledge"), "slug!": described(str(), "a knowledge item identifier; its latest version at run start")}, nil))
	add("LiteralBinding", closed(map[string]*openapi3.Schema{"type!": enum("literal"), "value!": anyValue()}, nil))

	// jobs
	add("JobManifest", closed(map[string]*openapi3.Schema{"schedule": nullableRef("ScheduleSection"), "verification": nullableRef("VerificationSection"),
		"outputs": described(nullable(mapOf("JobOutputSpec")), "public output contract of the job and of downstream lines")},
		map[string]string{"job!": "JobSection", "run!": "RunSection"}))
	add("JobSection", closed(map[string]*openapi3.Schema{"name!": described(str(), "must equal the deploy path name"), "version": strN(), "description": strN(),
		"params": described(nullable(mapOf("JobParamSpec")), "referenced as {{name}} in manifest strings; {{run_id}} is reserved")}, nil))
	add("JobParamSpec", closed(map[string]*openapi3.Schema{"type!": paramType, "items": itemsType(), "required": boolean().WithDefault(false),
		"description": strN(), "pattern": strN(), "prefix": strN(), "enum": nullable(arr(anyValue())),
		"default": described(anyValue(), "must fit type, items, enum, pattern and prefix; not with required = true")}, nil))
	add("RunSection", closed(map[string]*openapi3.Schema{"tasks!": listOf("Task").WithMinItems(1), "fail_fast": boolean().WithDefault(true),
		"fanout": boolean().WithDefault(false), "concurrency": integer().WithMin(1).WithDefault(1),
		"workdir": described(strN(), "working directory of every exec and run_agent step; falls back to run.sandbox.workdir, default ."),
		"timeout": described(strN(), "Go duration string, e.g. 30m"), "region": strN(), "teardown_on_complete": nullable(boolean()),
		"resume_on_start": nullable(boolean()), "sandbox": nullableRef("SandboxConfig")}, nil))
	add("Task", closed(map[string]*openapi3.Schema{"name!": str(), "steps!": listOf("Step").WithMinItems(1), "sandbox": nullableRef("SandboxConfig")}, nil))
	add("Step", described(closed(map[string]*openapi3.Schema{"name": strN(), "workdir": strN(), "timeout": described(minInt(1), "seconds"),
		"user": strN(), "exec": described(strList(), "shell command; {{name}} substituted in each element"), "run_agent": nullableRef("RunAgent"),
		"snapshot": nullableRef("SnapshotStep"), "pause": nullable(boolean()), "resume": nullable(boolean()), "delete": nullable(boolean()),
		"upload": described(strN(), "not implemented; must not be authored"), "download": described(strN(), "not implemented; must not be authored"),
		"outputs": nullableRef("StepOutputs")}, nil),
		"exactly one action key among exec, run_agent, snapshot, pause, resume, delete"))
	add("SnapshotStep", closed(map[string]*openapi3.Schema{"name!": str()}, nil))
	add("StepOutputs", described(&openapi3.Schema{OneOf: openapi3.SchemaRefs{arr(str()).NewRef(), mapOf("StepOutputClaim").NewRef()}},
		"the output keys the step claims: a list of key names, or a table keyed by output key"))
	add("StepOutputClaim", closed(map[string]*openapi3.Schema{"from": str(), "required": boolean()}, nil))
	add("RunAgent", union("mode", map[string]string{"exec": "RunAgentExec", "session": "RunAgentSession"}))
	add("RunAgentExec", closed(map[string]*openapi3.Schema{"mode!": enum("exec"), "command!": arr(str()),
		"harness!": enum(append(append([]string(nil), harnesses...), "custom")...), "model": strN()}, nil))
	add("RunAgentSession", closed(map[string]*openapi3.Schema{"mode!": enum("session"), "harness!": enum(harnesses...), "command": strList(),
		"effort": described(strN(), "reasoning effort; requires model"), "knowledge": nullable(listOf("KnowledgeRef")), "mcp": nullable(listOf("MCPServer")),
		"model": strN(), "model_provider": nullable(enum("svc", "svc_inference")), "prompt": nullableRef("Binding"), "resume_prompt": nullableRef("Binding"),
		"session": strN()}, nil))
	add("KnowledgeRef", closed(map[string]*openapi3.Schema{"slug!": str()}, nil))
	add("MCPServer", closed(map[string]*openapi3.Schema{"key!": str(), "url!": str()}, nil))
	add("ScheduleSection", closed(map[string]*openapi3.Schema{"cron!": described(str(), "standard 5-field cron; every param the schedule uses needs a default"),
		"timezone": described(str(), "IANA name").WithDefault("UTC"), "enabled": boolean().WithDefault(true)}, nil))
	add("VerificationSection", closed(map[string]*openapi3.Schema{"enabled": boolean().WithDefault(false), "gate": nullableRef("VerificationGate")}, nil))
	add("VerificationGate", closed(map[string]*openapi3.Schema{"compare_to": strN(), "min_pass_rate": openapi3.NewFloat64Schema().WithNullable()}, nil))
	add("JobOutputSpec", closed(map[string]*openapi3.Schema{"type!": paramType, "items": described(itemsType(), "required when type is array"),
		"required": boolean().WithDefault(true), "description": strN(), "enum": nullable(arr(anyValue())),
		"reduce": enum("one", "last", "collect", "gather").WithDefault("one")}, nil))
}

// sandboxSchemas are the schemas of a job's sandbox configuration.
func sandboxSchemas(add func(name string, schema *openapi3.Schema)) {
	add("SandboxConfig", closed(map[string]*openapi3.Schema{"mode": enum("provision", "ensure", "reuse").WithDefault("provision"),
		"name": described(strN(), "required for ensure and reuse; supports {{param}}"), "image": described(strN(), "required for provision and ensure"),
		"vcpus": integer().WithMin(1).WithDefault(2), "memory_mb": integer().WithMin(1).WithDefault(2048), "disk_gb": integer().WithMin(1).WithDefault(10),
		"snapshot_name": strN(), "gateway_profile": strN(), "environment": strN(), "cache_key": strN(), "init": nullableRef("SandboxInit"),
		"internet_enabled": boolean().WithDefault(true), "workdir": strN(), "env": nullable(openapi3.NewObjectSchema().WithAdditionalProperties(str())),
		"sources": nullable(listOf("GitSource")), "setup_scripts": nullable(listOf("SetupScript")), "lifecycle": nullableRef("SandboxLifecycle")}, nil))
	add("SandboxInit", union("type", map[string]string{"custom": "SandboxInitCustom", "full": "SandboxInitFull", "minimal": "SandboxInitMinimal"}))
	add("SandboxInitCustom", closed(map[string]*openapi3.Schema{"type!": enum("custom"), "await_ready": boolean().WithDefault(false),
		"capabilities": nullable(arr(enum("ssh", "docker")))}, nil))
	add("SandboxInitFull", closed(map[string]*openapi3.Schema{"type!": enum("full")}, nil))
	add("SandboxInitMinimal", closed(map[string]*openapi3.Schema{"type!": enum("minimal")}, nil))
	add("GitSource", closed(map[string]*openapi3.Schema{"repo_url!": str(), "branch": strN(), "target_path": strN(), "primary": nullable(boolean())}, nil))
	add("SetupScript", closed(map[string]*openapi3.Schema{"script!": str(), "name": str()}, nil))
	add("SandboxLifecycle", closed(map[string]*openapi3.Schema{"auto_resume": nullable(enum("never", "on_activity")),
		"delete_after": described(minInt(0), "seconds"), "pause_after": described(minInt(0), "seconds"), "pause_after_idle": described(minInt(0), "seconds")}, nil))
}

// lineManifestSchemas are the schemas of a line manifest but its transitions.
func lineManifestSchemas(add func(name string, schema *openapi3.Schema)) {
	// lines
	lineManifest := func(limits string) *openapi3.Schema {
		return closed(map[string]*openapi3.Schema{"stages!": listOf("LineStage").WithMinItems(1), "transitions": listOf("Transition"),
			"agent": nullableRef("LineAgentConfig")},
			map[string]string{"line!": "LineSection", "trigger!": "Trigger", "limits": limits})
	}
	add("LineManifest", lineManifest("LineLimits"))
	add("LineManifestInput", described(lineManifest("LineLimitsInput"), "a line manifest as deployed: limits.budget_usd may be a number"))
	add("LineSection", closed(map[string]*openapi3.Schema{"name!": described(str(), "must equal the deploy path name"), "description": strN(), "category": strN()}, nil))
	add("LineStage", closed(map[string]*openapi3.Schema{"id!": str(), "job!": described(str(), "job name"), "job_version_id": described(strN(), "pins a version of the job"),
		"description": strN(), "max_attempts": minInt(1)}, nil))
	add("LineAgentConfig", closed(map[string]*openapi3.Schema{"instructions": nullableRef("Binding")}, nil))
	limits := func(budget *openapi3.Schema) *openapi3.Schema {
		return closed(map[string]*openapi3.Schema{"max_iterations": minInt(1), "budget_usd": budget,
			"timeout": described(strN(), "Go duration string, e.g. 2h")}, nil)
	}
	add("LineLimits", limits(described(strN().WithPattern(`^-?[0-9]+\.[0-9]{2}$`), `decimal string with two places, e.g. "25.50"`)))
	add("LineLimitsInput", limits(described(&openapi3.Schema{Nullable: true, OneOf: openapi3.SchemaRefs{
		str().WithPattern(`^\s*-?([0-9]+\.?[0-9]*|\.[0-9]+)\s*$`).NewRef(), openapi3.NewFloat64Schema().NewRef()}},
		"a number or a decimal string; returned as a decimal string")))
	add("Trigger", union("type", map[string]string{"integration_trigger": "IntegrationTrigger", "manual": "ManualTrigger",
		"schedule": "ScheduleTrigger", "webhook": "WebhookTrigger"}))
	add("IntegrationTrigger", closed(map[string]*openapi3.Schema{"type!": enum("integration_trigger"), "name!": str(),
		"provider!": enum("code_host", "issue_tracker_a", "chat_tool"), "filters": listOf("Condition"), "outputs": mapOf("TriggerPathBinding")},
		map[string]string{"selector!": "Selector"}))
	add("ManualTrigger", closed(map[string]*openapi3.Schema{"type!": enum("manual")}, nil))
	add("ScheduleTrigger", closed(map[string]*openapi3.Schema{"type!": enum("schedule"), "cron!": described(str(), "standard 5-field cron"),
		"inputs": freeObject(), "timezone": described(str(), "IANA name").WithDefault("UTC")}, nil))
	add("WebhookTrigger", closed(map[string]*openapi3.Schema{"type!": enum("webhook"), "path!": str()}, nil))
	add("TriggerPathBinding", closed(map[string]*openapi3.Schema{"type!": enum("trigger_path"), "path!": str()}, nil))
	// The selector's provider is the trigger's, so it may be absent: the
	// variants are told apart by the trigger, not by a discriminator here.
	add("Selector", described(&openapi3.Schema{AnyOf: openapi3.SchemaRefs{ref("CodeHostSelector"), ref("IssueTrackerASelector"), ref("ChatToolSelector")}},
		"one variant per provider (the trigger's provider); every field is optional"))
	scope := func() *openapi3.Schema { return enum("all", "selected") }
	add("CodeHostSelector", closed(map[string]*openapi3.Schema{"provider": enum("code_host"), "kind": enum("repository").WithDefault("repository"),
		"repositories": arr(str()), "scope": scope()}, nil))
	add("IssueTrackerASelector", closed(map[string]*openapi3.Schema{"provider": enum("issue_tracker_a"), "kind": enum("issue").WithDefault("issue"),
		"labels": arr(str()), "project_ids": arr(str()), "scope": scope(), "states": arr(str()), "team_ids": arr(str())}, nil))
	add("ChatToolSelector", closed(map[string]*openapi3.Schema{"provider": enum("chat_tool"), "channels": arr(str()),
		"kind": enum("channel").WithDefault("channel"), "scope": scope()}, nil))
}

// transitionSchemas are the schemas of a line's transitions and their
// conditions.
func transitionSchemas(add func(name string, schema *openapi3.Schema)) {
	add("Transition", union("type", map[string]string{"conditional": "ConditionalTransition", "agentic": "AgenticTransition"}))
	add("ConditionalTransition", closed(map[string]*openapi3.Schema{"type!": enum("conditional"), "id!": str(), "from!": str(), "to!": str(),
		"label": strN(), "max_iterations": minInt(1), "params": mapOf("ParamBinding")}, map[string]string{"when!": "Condition"}))
	add("AgenticTransition", closed(map[string]*openapi3.Schema{"type!": enum("agentic"), "id!": str(), "from!": str(), "label": strN(),
		"options": listOf("AgenticTransitionOption")}, map[string]string{"instructions!": "Binding"}))
	add("AgenticTransitionOption", closed(map[string]*openapi3.Schema{"name!": str(), "to!": str(), "label": strN(), "params": mapOf("ParamBinding")}, nil))
	add("ParamBinding", union("type", map[string]string{"input": "InputParamBinding", "literal": "LiteralParamBinding", "output": "OutputParamBinding"}))
	add("InputParamBinding", closed(map[string]*openapi3.Schema{"type!": enum("input"), "name!": described(str(), "a line run param")}, nil))
	add("LiteralParamBinding", closed(map[string]*openapi3.Schema{"type!": enum("literal"), "value!": anyValue()}, nil))
	add("OutputParamBinding", closed(map[string]*openapi3.Schema{"type!": enum("output"), "name!": described(str(), "a published output key"),
		"stage!": str()}, nil))
	add("Condition", union("op", map[string]string{"all": "GroupCondition", "any": "GroupCondition", "not": "NotCondition", "always": "AlwaysCondition",
		"eq": "CompareCondition", "ne": "CompareCondition", "contains": "CompareCondition", "not_contains": "CompareCondition",
		"exists": "OperandCondition", "missing": "OperandCondition", "truthy": "OperandCondition", "falsy": "OperandCondition"}))
	add("GroupCondition", closed(map[string]*openapi3.Schema{"op!": enum("all", "any"), "conditions!": listOf("Condition")}, nil))
	add("NotCondition", closed(map[string]*openapi3.Schema{"op!": enum("not")}, map[string]string{"condition!": "Condition"}))
	add("AlwaysCondition", closed(map[string]*openapi3.Schema{"op!": enum("always")}, nil))
	add("CompareCondition", closed(map[string]*openapi3.Schema{"op!": enum("eq", "ne", "contains", "not_contains")},
		map[string]string{"left!": "Operand", "right!": "Operand"}))
	add("OperandCondition", closed(map[string]*openapi3.Schema{"op!": enum("exists", "missing", "truthy", "falsy")},
		map[string]string{"operand!": "Operand"}))
	add("Operand", union("type", map[string]string{"literal": "LiteralOperand", "stage": "StageOperand", "transition": "TransitionOperand", "trigger": "TriggerOperand"}))
	add("LiteralOperand", closed(map[string]*openapi3.Schema{"type!": enum("literal"), "value!": anyValue()}, nil))
	add("StageOperand", closed(map[string]*openapi3.Schema{"type!": enum("stage"), "path!": str(),
		"stage": described(strN(), "default: the transition's from stage")}, nil))
	add("TransitionOperand", closed(map[string]*openapi3.Schema{"type!": enum("transition"), "id!": str(), "path!": str()}, nil))
	add("TriggerOperand", closed(map[string]*openapi3.Schema{"type!": enum("trigger"), "path!": str()}, nil))
}
