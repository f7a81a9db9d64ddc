package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/linefactory/linefactory/store"
	"github.com/linefactory/linefactory/store/storetest"
)

// harness is a real router on a real store, with one token per scope. Every
// response it sees is validated against the OpenAPI document.
type harness struct {
	t      *testing.T
	srv    *Server
	doc    *openapi3.T
	tokens map[string]string
}

func newHarness(t *testing.T, st *store.Store) *harness {
	t.Helper()
	srv := New(Config{Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)), MaxBodyBytes: 1 << 20, Agents: exampleAgents(t)}, st)
	doc, err := srv.OpenAPI()
	if err != nil {
		t.Fatalf("OpenAPI document does not load: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("OpenAPI document is invalid: %v", err)
	}
	h := &harness{t: t, srv: srv, doc: doc, tokens: map[string]string{}}
	for _, scope := range []string{ScopeRead, ScopeWrite, ScopeAdmin} {
		secret := NewTokenSecret()
		if _, err := st.CreateToken(context.Background(), "test-"+scope, scope, HashToken(secret)); err != nil {
			t.Fatal(err)
		}
		h.tokens[scope] = secret
	}
	return h
}

// forEachStore runs an API test on SQLite and on PostgreSQL.
func forEachStore(t *testing.T, test func(t *testing.T, h *harness)) {
	storetest.ForEach(t, func(t *testing.T, st *store.Store) { test(t, newHarness(t, st)) })
}

type response struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r response) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("response is not a JSON object: %v\n%s", err, r.Body)
	}
	return m
}

func (r response) list(t *testing.T) []map[string]any {
	t.Helper()
	var l []map[string]any
	if err := json.Unmarshal(r.Body, &l); err != nil {
		t.Fatalf("response is not a JSON list: %v\n%s", err, r.Body)
	}
	return l
}

type req struct {
	method, path string
	body         any    // marshalled to JSON unless a string
	contentType  string // default application/json
	scope        string // token scope; "" = no token; "bad" = a wrong token
	chunked      bool   // send the body without a Content-Length
	header       http.Header
}

// onlyReader hides the concrete reader type, so the request has no
// Content-Length (as a chunked upload).
type onlyReader struct{ io.Reader }

func (h *harness) do(r req) response {
	h.t.Helper()
	var body io.Reader
	switch b := r.body.(type) {
	case nil:
	case string:
		body = strings.NewReader(b)
	case []byte:
		body = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			h.t.Fatal(err)
		}
		body = bytes.NewReader(data)
	}
	if body != nil && r.chunked {
		body = onlyReader{body}
	}
	hr := httptest.NewRequest(r.method, r.path, body)
	for k, vs := range r.header {
		hr.Header[k] = vs
	}
	if body != nil {
		ct := r.contentType
		if ct == "" {
			ct = "application/json"
		}
		hr.Header.Set("Content-Type", ct)
	}
	switch r.scope {
	case "":
	case "bad":
		hr.Header.Set("Authorization", "Bearer not-a-token")
	default:
		hr.Header.Set("Authorization", "Bearer "+h.tokens[r.scope])
	}
	rec := httptest.NewRecorder()
	h.srv.ServeHTTP(rec, hr)
	resp := response{Status: rec.Code, Header: rec.Header(), Body: rec.Body.Bytes()}
	if resp.Header.Get("X-Request-Id") == "" {
		h.t.Errorf("%s %s: no X-Request-Id header", r.method, r.path)
	}
	h.validate(hr, resp)
	return resp
}

// validate checks a response against the OpenAPI operation of its route.
func (h *harness) validate(hr *http.Request, resp response) {
	h.t.Helper()
	var match *Route
	var params map[string]string
	for _, rt := range h.srv.Routes() {
		if rt.Method != hr.Method {
			continue
		}
		if p, ok := matchPath(rt.Path, hr.URL.Path); ok {
			rt := rt
			match, params = &rt, p
			break
		}
	}
	if match == nil {
		return // unknown routes are answered by NoRoute/NoMethod
	}
	path := openAPIPath(match.Path)
	item := h.doc.Paths.Find(path)
	if item == nil || item.GetOperation(hr.Method) == nil {
		h.t.Errorf("%s %s is not in the OpenAPI document", hr.Method, path)
		return
	}
	route := &routers.Route{Spec: h.doc, Path: path, PathItem: item, Method: hr.Method, Operation: item.GetOperation(hr.Method)}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: hr, PathParams: params, Route: route},
		Status:                 resp.Status,
		Header:                 resp.Header,
		Options:                &openapi3filter.Options{IncludeResponseStatus: true},
	}
	in.SetBodyBytes(resp.Body)
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		h.t.Errorf("%s %s -> %d does not match the OpenAPI document: %v\nbody: %s", hr.Method, hr.URL.Path, resp.Status, err, resp.Body)
	}
}

func matchPath(pattern, path string) (map[string]string, bool) {
	pp, ap := strings.Split(pattern, "/"), strings.Split(path, "/")
	params := map[string]string{}
	if n := len(pp) - 1; strings.HasPrefix(pp[n], "*") && len(ap) > n {
		params[pp[n][1:]] = strings.Join(ap[n:], "/")
		pp, ap = pp[:n], ap[:n]
	}
	if len(pp) != len(ap) {
		return nil, false
	}
	for i := range pp {
		if strings.HasPrefix(pp[i], ":") {
			params[pp[i][1:]] = ap[i]
			continue
		}
		if pp[i] != ap[i] {
			return nil, false
		}
	}
	return params, true
}

// expect fails the test unless the response has the status.
func expect(t *testing.T, r response, status int) {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status %d, want %d\nbody: %s", r.Status, status, r.Body)
	}
}

// expectError checks an error body and its code.
func expectError(t *testing.T, r response, status int, code string) map[string]any {
	t.Helper()
	expect(t, r, status)
	m := r.json(t)
	if m["code"] != code {
		t.Fatalf("code %v, want %s\nbody: %s", m["code"], code, r.Body)
	}
	if m["request_id"] != r.Header.Get("X-Request-Id") {
		t.Fatalf("request_id %v does not repeat X-Request-Id %q", m["request_id"], r.Header.Get("X-Request-Id"))
	}
	return m
}

// expectDetail checks a validation body has an entry at loc.
func expectDetail(t *testing.T, r response, loc ...any) {
	t.Helper()
	expect(t, r, http.StatusUnprocessableEntity)
	var body ValidationBody
	if err := json.Unmarshal(r.Body, &body); err != nil || len(body.Detail) == 0 {
		t.Fatalf("not a validation body: %s", r.Body)
	}
	want, _ := json.Marshal(loc)
	for _, d := range body.Detail {
		got, _ := json.Marshal(d.Loc)
		if string(got) == string(want) {
			return
		}
	}
	t.Fatalf("no detail at %s in %s", want, r.Body)
}

func readExample(t *testing.T, rel string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "manifests", "examples", rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// deployExampleJob deploys manifests/examples/jobs/<name>/job.toml.
func (h *harness) deployExampleJob(name string) map[string]any {
	h.t.Helper()
	r := h.do(req{method: "POST", path: "/jobs/" + name + "/versions", body: readExample(h.t, "jobs/"+name+"/job.toml"), contentType: "application/toml", scope: ScopeWrite})
	if r.Status != http.StatusCreated && r.Status != http.StatusOK {
		h.t.Fatalf("deploy %s: %d %s", name, r.Status, r.Body)
	}
	return r.json(h.t)
}

func storetestSQLite(t *testing.T) *store.Store { return storetest.SQLite(t) }

func init() {
	// Server-Sent Events are text; validate them as a string.
	openapi3filter.RegisterBodyDecoder("text/event-stream", func(body io.Reader, _ http.Header, _ *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
		b, err := io.ReadAll(body)
		return string(b), err
	})
}
