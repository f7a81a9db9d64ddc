package api

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestDrainEndsFollowedLogs: a followed log of a run that never ends must not
// hold a graceful shutdown; Drain ends it with an "end" event.
func TestDrainEndsFollowedLogs(t *testing.T) {
	h := newHarness(t, storetestSQLite(t))
	h.srv.cfg.Runs = &fakeRuns{} // the run stays queued: the stream would never end
	h.deployExampleJob("hello")
	r := h.do(req{method: "POST", path: "/jobs/hello/runs", body: map[string]any{}, scope: ScopeWrite})
	expect(t, r, http.StatusCreated)
	id := r.json(t)["id"].(string)

	ts := httptest.NewServer(h.srv)
	defer ts.Close()
	follow := func() (*http.Response, error) {
		hr, _ := http.NewRequest("GET", ts.URL+"/job-runs/"+id+"/logs?follow=true", nil)
		hr.Header.Set("Authorization", "Bearer "+h.tokens[ScopeRead])
		return http.DefaultClient.Do(hr)
	}
	readAll := func(resp *http.Response) string {
		t.Helper()
		done := make(chan string, 1)
		go func() { b, _ := io.ReadAll(resp.Body); done <- string(b) }()
		select {
		case body := <-done:
			return body
		case <-time.After(10 * time.Second):
			t.Fatal("the followed log did not end after Drain")
			return ""
		}
	}

	resp, err := follow() // headers arrive once the stream has started
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("follow: status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	h.srv.Drain()
	h.srv.Drain() // idempotent
	if body := readAll(resp); !strings.Contains(body, "event:end") || !strings.Contains(body, "shutting_down") {
		t.Fatalf("stream ended without the shutdown end event: %q", body)
	}

	// A stream opened while draining ends at once.
	resp2, err := follow()
	if err != nil {
		t.Fatal(err)
	}
	defer resp2.Body.Close()
	if body := readAll(resp2); !strings.Contains(body, "shutting_down") {
		t.Fatalf("stream opened after Drain: %q", body)
	}

	// Ordinary requests still work after Drain.
	expect(t, h.do(req{method: "GET", path: "/jobs", scope: ScopeRead}), http.StatusOK)
}

func TestBearerScheme(t *testing.T) {
	h := newHarness(t, storetestSQLite(t))
	tok := h.tokens[ScopeRead]
	for _, tc := range []struct {
		name, header string
		want         int
	}{
		{"canonical", "Bearer " + tok, 200},
		{"lowercase_scheme", "bearer " + tok, 200},
		{"uppercase_scheme", "BEARER " + tok, 200},
		{"extra_spaces", "Bearer   " + tok + " ", 200},
		{"basic_scheme", "Basic " + tok, 401},
		{"scheme_only", "Bearer", 401},
		{"empty_secret", "Bearer   ", 401},
		{"secret_without_scheme", tok, 401},
		{"wrong_secret", "Bearer " + tok + "x", 401},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hr := httptest.NewRequest("GET", "/jobs", nil)
			hr.Header.Set("Authorization", tc.header)
			rec := httptest.NewRecorder()
			h.srv.ServeHTTP(rec, hr)
			if rec.Code != tc.want {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.want, rec.Body)
			}
			if tc.want == 401 && !strings.Contains(rec.Body.String(), `"code":"AUTH_REQUIRED"`) {
				t.Fatalf("401 without AUTH_REQUIRED: %s", rec.Body)
			}
		})
	}
}
