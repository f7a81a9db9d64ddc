package api

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
)

// TestNestedDetailLocations: unknown fields and wrong types deep in a body
// are located with their path and array indexes.
func TestNestedDetailLocations(t *testing.T) {
	h := newHarness(t, storetestSQLite(t))
	base := func(links ...any) map[string]any {
		return map[string]any{"identifier": "a", "type": "prompt", "level": "prompt", "format": "text", "body": "x", "links": links}
	}
	for _, tc := range []struct {
		name string
		body map[string]any
		loc  []any
	}{
		{"unknown key in an array element", base(map[string]any{"link_type": "tag", "value": "v"}, map[string]any{"link_type": "tag", "value": "v", "foo": 1}), []any{"body", "links", 1.0, "foo"}},
		{"wrong type in an array element", base(map[string]any{"link_type": "tag", "value": 5}), []any{"body", "links", 0.0, "value"}},
		{"element not an object", base("tag"), []any{"body", "links", 0.0}},
		{"top-level unknown key", map[string]any{"identifier": "a", "colour": 1}, []any{"body", "colour"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			expectDetail(t, h.do(req{method: "POST", path: "/knowledge", body: tc.body, scope: ScopeWrite}), tc.loc...)
		})
	}
	// A field matched case-insensitively by the decoder is not reported as unknown.
	r := h.do(req{method: "POST", path: "/tokens", body: `{"Name": "ci", "scope": 5}`, scope: ScopeAdmin})
	expectDetail(t, r, "body", "scope")
	if strings.Contains(string(r.Body), `"Name"`) {
		t.Fatalf("case-insensitive field reported: %s", r.Body)
	}
}

// TestTrailingDataRejected: a JSON body followed by anything else is 422.
func TestTrailingDataRejected(t *testing.T) {
	h := newHarness(t, storetestSQLite(t))
	for _, body := range []string{`{"name": "ci"} x`, `{"name": "ci"}}`, `{"name": "ci"}{}`, `{"name": "ci"}]`} {
		expectDetail(t, h.do(req{method: "POST", path: "/tokens", body: body, scope: ScopeAdmin}), "body")
	}
	expect(t, h.do(req{method: "POST", path: "/tokens", body: "{\"name\": \"ci\"} \n", scope: ScopeAdmin}), http.StatusCreated)
}

// TestBodyLimit: 413 also without a Content-Length, and only after auth.
func TestBodyLimit(t *testing.T) {
	h := newHarness(t, storetestSQLite(t))
	big := `{"body":"` + strings.Repeat("x", 2<<20) + `"}`
	expectError(t, h.do(req{method: "POST", path: "/knowledge", body: big, scope: ScopeWrite, chunked: true}), 413, CodeInvalidRequest)
	expectError(t, h.do(req{method: "POST", path: "/jobs/x/versions", body: big, scope: ScopeWrite, chunked: true}), 413, CodeInvalidRequest)
	expectError(t, h.do(req{method: "POST", path: "/jobs/x/versions", body: big, contentType: "application/toml", scope: ScopeWrite, chunked: true}), 413, CodeInvalidRequest)
	for _, chunked := range []bool{false, true} {
		expectError(t, h.do(req{method: "POST", path: "/knowledge", body: big, chunked: chunked}), 401, CodeAuthRequired)
		expectError(t, h.do(req{method: "POST", path: "/knowledge", body: big, scope: "bad", chunked: chunked}), 401, CodeAuthRequired)
		expectError(t, h.do(req{method: "POST", path: "/knowledge", body: big, scope: ScopeRead, chunked: chunked}), 403, CodeAccessDenied)
	}
}

// TestNoRedirects: a trailing slash or a wrong case is a JSON 404, not an
// HTML redirect; HEAD works on the public GET endpoints.
func TestNoRedirects(t *testing.T) {
	h := newHarness(t, storetestSQLite(t))
	for _, path := range []string{"/jobs/", "/JOBS", "/factory/lines/", "/healthz/", "//jobs"} {
		r := h.do(req{method: "GET", path: path, scope: ScopeRead})
		expectError(t, r, http.StatusNotFound, CodeNotFound)
		if loc := r.Header.Get("Location"); loc != "" {
			t.Errorf("GET %s redirects to %s", path, loc)
		}
	}
	for _, path := range []string{"/healthz", "/readyz", "/metrics", "/openapi.json"} {
		expect(t, h.do(req{method: "HEAD", path: path}), http.StatusOK)
	}
	expectError(t, h.do(req{method: "HEAD", path: "/jobs", scope: ScopeRead}), http.StatusMethodNotAllowed, CodeInvalidRequest)
}

// TestSlowRequestFinishesDuringShutdown: a graceful shutdown waits for an
// ordinary request in flight, which completes normally.
func TestSlowRequestFinishesDuringShutdown(t *testing.T) {
	h := newHarness(t, storetestSQLite(t))
	started, release := make(chan struct{}), make(chan struct{})
	h.srv.engine.GET("/test-slow", func(c *gin.Context) {
		close(started)
		<-release
		c.JSON(http.StatusOK, gin.H{"status": "done"})
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: h.srv, ReadHeaderTimeout: 5 * time.Second}
	hs.RegisterOnShutdown(h.srv.Drain)
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()

	type result struct {
		status int
		err    error
	}
	got := make(chan result, 1)
	go func() {
		resp, err := http.Get("http://" + ln.Addr().String() + "/test-slow")
		if err != nil {
			got <- result{err: err}
			return
		}
		resp.Body.Close()
		got <- result{status: resp.StatusCode}
	}()
	<-started
	shutdown := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		shutdown <- hs.Shutdown(ctx)
	}()
	// Shutdown has begun once the listener refuses connections.
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", ln.Addr().String(), 100*time.Millisecond)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("the listener still accepts after Shutdown")
		}
	}
	select {
	case err := <-shutdown:
		t.Fatalf("Shutdown returned (%v) with a request in flight", err)
	default:
	}
	close(release)
	if r := <-got; r.err != nil || r.status != http.StatusOK {
		t.Fatalf("in-flight request: status %d, error %v", r.status, r.err)
	}
	if err := <-shutdown; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("Serve: %v", err)
	}
}
