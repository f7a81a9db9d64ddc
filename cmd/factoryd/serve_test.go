package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestServeShutsDownCleanly runs serve in-process (API role, embedded
// Temporal, SQLite in a temp data dir), checks the public and an
// authenticated endpoint, then cancels its context as SIGTERM does: serve
// must return nil promptly even with a followed log open, and stop listening.
func TestServeShutsDownCleanly(t *testing.T) {
	dir := t.TempDir()
	cfg, err := loadConfig("serve", []string{"--addr", "127.0.0.1:0", "--data-dir", dir, "--roles", "api",
		"--temporal-port", strconv.Itoa(freePort(t)), "--temporal-ui-addr", "off"})
	if err != nil {
		t.Fatal(err)
	}
	const token = "serve-test-token"
	cfg.BootstrapToken = token
	logs := &syncWriter{w: &bytes.Buffer{}}
	logger := slog.New(slog.NewJSONHandler(logs, nil))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan string, 1)
	errc := make(chan error, 1)
	go func() { errc <- serve(ctx, cfg, logger, ready, nil) }()
	var base string
	select {
	case addr := <-ready:
		base = "http://" + addr
	case err := <-errc:
		t.Fatalf("serve exited before listening: %v", err)
	case <-time.After(120 * time.Second):
		t.Fatal("serve did not listen within 120s")
	}

	call := func(method, path, auth, body string) (int, []byte) {
		t.Helper()
		hr, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		if auth != "" {
			hr.Header.Set("Authorization", "Bearer "+auth)
		}
		if body != "" {
			hr.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(hr)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.Header.Get("X-Request-Id") == "" {
			t.Errorf("%s %s: no X-Request-Id", method, path)
		}
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, data
	}
	if code, body := call("GET", "/healthz", "", ""); code != 200 {
		t.Fatalf("/healthz: %d %s", code, body)
	}
	if code, body := call("GET", "/jobs", "", ""); code != 401 || !bytes.Contains(body, []byte("AUTH_REQUIRED")) {
		t.Fatalf("/jobs without a token: %d %s", code, body)
	}
	if code, body := call("GET", "/jobs", token, ""); code != 200 || string(bytes.TrimSpace(body)) != "[]" {
		t.Fatalf("/jobs with the bootstrap token: %d %s", code, body)
	}
	job := `{"manifest":{"job":{"name":"wait"},"run":{"tasks":[{"name":"t","steps":[{"exec":["true"]}]}]}}}`
	if code, body := call("POST", "/jobs/wait/versions", token, job); code != 201 {
		t.Fatalf("deploy: %d %s", code, body)
	}
	// Without the worker role the run stays queued, so its followed log
	// would never end by itself.
	code, body := call("POST", "/jobs/wait/runs", token, "{}")
	if code != 201 {
		t.Fatalf("start run: %d %s", code, body)
	}
	var run struct{ ID string }
	_ = json.Unmarshal(body, &run)
	hr, _ := http.NewRequest("GET", base+"/job-runs/"+run.ID+"/logs?follow=true", nil)
	hr.Header.Set("Authorization", "Bearer "+token)
	stream, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Body.Close()
	if stream.StatusCode != 200 {
		t.Fatalf("follow: %d", stream.StatusCode)
	}
	streamBody := make(chan string, 1)
	go func() {
		var b strings.Builder
		sc := bufio.NewScanner(stream.Body)
		for sc.Scan() {
			b.WriteString(sc.Text() + "\n")
		}
		streamBody <- b.String()
	}()

	cancel() // what SIGTERM does through signal.NotifyContext
	start := time.Now()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("serve returned %v, want a clean shutdown\nlogs:\n%s", err, logs.String())
		}
	case <-time.After(25 * time.Second):
		t.Fatal("serve did not return within 25s of the cancel: a followed log holds the shutdown")
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("shutdown took %s", d)
	}
	select {
	case b := <-streamBody:
		if !strings.Contains(b, "shutting_down") {
			t.Errorf("the followed log ended without the shutdown event: %q", b)
		}
	case <-time.After(5 * time.Second):
		t.Error("the followed log is still open after serve returned")
	}
	if c, err := net.DialTimeout("tcp", strings.TrimPrefix(base, "http://"), time.Second); err == nil {
		c.Close()
		t.Error("the API still accepts connections after serve returned")
	}
	if !strings.Contains(logs.String(), `"request_id"`) {
		t.Errorf("request logs carry no request_id:\n%s", logs.String())
	}
}

// syncWriter is a log sink safe to read while goroutines still write to it.
type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.String()
}

// A Temporal port that the configuration names and another process holds
// fails serve with an error saying so; the embedded server's fatal log
// (zap's Fatal, which ends the process) must not end the caller.
func TestServeWithTakenTemporalPort(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	port := held.Addr().(*net.TCPAddr).Port
	cfg, err := loadConfig("serve", []string{"--addr", "127.0.0.1:0", "--data-dir", t.TempDir(), "--roles", "api",
		"--temporal-port", strconv.Itoa(port), "--temporal-ui-addr", "off"})
	if err != nil {
		t.Fatal(err)
	}
	cfg.BootstrapToken = "serve-test-token"
	err = serve(context.Background(), cfg, slog.New(slog.NewJSONHandler(io.Discard, nil)), nil, nil)
	want := "127.0.0.1:" + strconv.Itoa(port)
	if err == nil || !strings.Contains(err.Error(), "address already in use") || !strings.Contains(err.Error(), want) {
		t.Fatalf("serve with Temporal's port taken: %v, want an error naming %s in use", err, want)
	}
}
