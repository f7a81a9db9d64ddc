package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"
)

func TestRequestID(t *testing.T) {
	h := newHarness(t, storetestSQLite(t))
	for _, tc := range []struct {
		name, incoming string
		kept           bool
	}{
		{"sane_kept", "abc-123.x:y_Z", true},
		{"absent_generated", "", false},
		{"spaces_replaced", "abc 123", false},
		{"too_long_replaced", strings.Repeat("a", 129), false},
		{"control_chars_replaced", "abc\x01", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hr := httptest.NewRequest("GET", "/jobs/none", nil)
			hr.Header.Set("Authorization", "Bearer "+h.tokens[ScopeRead])
			if tc.incoming != "" {
				hr.Header.Set("X-Request-Id", tc.incoming)
			}
			rec := httptest.NewRecorder()
			h.srv.ServeHTTP(rec, hr)
			got := rec.Header().Get("X-Request-Id")
			if tc.kept && got != tc.incoming {
				t.Fatalf("X-Request-Id %q, want the incoming %q", got, tc.incoming)
			}
			if !tc.kept && (got == "" || got == tc.incoming) {
				t.Fatalf("X-Request-Id %q: want a generated id", got)
			}
			var body ErrorBody
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || body.RequestID == nil || *body.RequestID != got {
				t.Fatalf("error body does not repeat the request id %q: %s", got, rec.Body)
			}
		})
	}
}

func TestReadyzReportsFailingChecks(t *testing.T) {
	h := newHarness(t, storetestSQLite(t))
	h.srv.cfg.ReadyChecks = map[string]func(context.Context) error{
		"temporal": func(context.Context) error { return errors.New("connection refused") },
	}
	r := h.do(req{method: "GET", path: "/readyz"})
	expect(t, r, http.StatusServiceUnavailable)
	m := r.json(t)
	checks, _ := m["checks"].(map[string]any)
	if m["code"] != CodeResourceUnavailable || checks["store"] != "ok" || checks["temporal"] != "connection refused" {
		t.Fatalf("readyz body: %s", r.Body)
	}
	h.srv.cfg.ReadyChecks["temporal"] = func(context.Context) error { return nil }
	expect(t, h.do(req{method: "GET", path: "/readyz"}), http.StatusOK)
}

// TestLogLinesCarryRequestID: the request log line and the full internal
// error line both carry the request id of the response.
func TestLogLinesCarryRequestID(t *testing.T) {
	var logs bytes.Buffer
	st := storetestSQLite(t)
	srv := New(Config{Logger: slog.New(slog.NewJSONHandler(&logs, nil))}, st)
	srv.engine.GET("/test-panic", func(c *gin.Context) { panic("secret detail") })
	for _, path := range []string{"/healthz", "/test-panic", "/jobs"} {
		logs.Reset()
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		rid := rec.Header().Get("X-Request-Id")
		lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
		if len(lines) == 0 || lines[0] == "" {
			t.Fatalf("%s: no log lines", path)
		}
		for _, line := range lines {
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("%s: log line is not JSON: %q", path, line)
			}
			if rec["request_id"] != rid {
				t.Fatalf("%s: log line without request id %q: %s", path, rid, line)
			}
		}
		if path == "/test-panic" && !strings.Contains(logs.String(), "secret detail") {
			t.Fatalf("the panic is not logged in full:\n%s", logs.String())
		}
	}
}
