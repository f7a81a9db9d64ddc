package api

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/linefactory/linefactory/manifests"
)

// expectLimit checks an error body carrying a limit's figures.
func expectLimit(t *testing.T, r response, status int, limit, requested int64) {
	t.Helper()
	code := CodeValidation
	if status == http.StatusRequestEntityTooLarge {
		code = CodeInvalidRequest
	}
	m := expectError(t, r, status, code)
	if m["limit"] != float64(limit) || (requested != 0 && m["requested"] != float64(requested)) {
		t.Fatalf("limit %v requested %v, want %d and %d\nbody: %s", m["limit"], m["requested"], limit, requested, r.Body)
	}
}

func stepsJob(name string, tasks ...int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "[job]\nname = %q\n", name)
	for ti, n := range tasks {
		fmt.Fprintf(&b, "[[run.tasks]]\nname = \"t%d\"\n", ti)
		for i := 0; i < n; i++ {
			b.WriteString("[[run.tasks.steps]]\nexec = [\"true\"]\n")
		}
	}
	return b.String()
}

// TestLimitsAnswered: every limit is answered with its status and its
// figures in limit and requested, never a 502.
func TestLimitsAnswered(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		h.srv.cfg.Runs = &fakeRuns{}
		h.srv.cfg.MaxBodyBytes = 4 << 20
		toml := func(path, body string) response {
			return h.do(req{method: "POST", path: path, body: body, contentType: "application/toml", scope: ScopeWrite})
		}
		big := "[job]\nname = \"big\"\ndescription = \"" + strings.Repeat("x", manifests.MaxManifestBytes) + "\"\n"
		expectLimit(t, toml("/jobs/big/versions", big), http.StatusRequestEntityTooLarge, manifests.MaxManifestBytes, int64(len(big)))
		deep := "[job]\nname = \"deep\"\n[job.params.p]\ntype = \"array\"\ndefault = " + strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000) + "\n"
		expectLimit(t, toml("/jobs/deep/versions", deep), http.StatusUnprocessableEntity, manifests.MaxDepth, 100_004)
		deepLine := `{"manifest": {"line": {"name": "deep"}, "x": ` + strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000) + `}}`
		expectLimit(t, h.do(req{method: "POST", path: "/factory/lines/deep/deploy", body: deepLine, scope: ScopeWrite}),
			http.StatusUnprocessableEntity, manifests.MaxDepth, 100_001)
		expectLimit(t, toml("/jobs/long/versions", stepsJob("long", manifests.MaxStepsPerTask+1)),
			http.StatusUnprocessableEntity, manifests.MaxStepsPerTask, manifests.MaxStepsPerTask+1)
		expect(t, toml("/jobs/long/versions", stepsJob("long", manifests.MaxStepsPerTask)), http.StatusCreated)
		expectLimit(t, toml("/jobs/wide/versions", stepsJob("wide", manifests.MaxStepsPerJob/2, manifests.MaxStepsPerJob/2, 1)),
			http.StatusUnprocessableEntity, manifests.MaxStepsPerJob, manifests.MaxStepsPerJob+1)
		// Params travel with every step: 400 steps of 100 KB each would not fit the history.
		heavy := strings.Replace(stepsJob("heavy", 400), "[[run.tasks]]", "[job.params.blob]\ntype = \"string\"\n[[run.tasks]]", 1)
		expect(t, toml("/jobs/heavy/versions", heavy), http.StatusCreated)
		r := h.do(req{method: "POST", path: "/jobs/heavy/runs", body: map[string]any{"params": map[string]any{"blob": strings.Repeat("x", 100<<10)}}, scope: ScopeWrite})
		expectLimit(t, r, http.StatusRequestEntityTooLarge, manifests.MaxRunHistoryBytes, 0)

		h.deployExampleJob("hello")
		param := strings.Repeat("x", manifests.MaxParamsBytes)
		r = h.do(req{method: "POST", path: "/jobs/hello/runs", body: map[string]any{"params": map[string]any{"who": param}}, scope: ScopeWrite})
		expectLimit(t, r, http.StatusRequestEntityTooLarge, manifests.MaxParamsBytes, 0)
		// One param is one environment string of every step (SVC_PARAM_WHO=…),
		// which Linux caps at 128 KiB: a 140 KB value made every step fail
		// EXEC_FAILED "argument list too long" after a 201.
		r = h.do(req{method: "POST", path: "/jobs/hello/runs", body: map[string]any{"params": map[string]any{"who": strings.Repeat("x", 140_000)}}, scope: ScopeWrite})
		expectLimit(t, r, http.StatusRequestEntityTooLarge, manifests.MaxParamEnvBytes, int64(len("SVC_PARAM_WHO=")+140_000))
		h.srv.cfg.MaxBodyBytes = 1 << 20
		r = h.do(req{method: "POST", path: "/jobs/hello/runs", body: map[string]any{"params": map[string]any{"who": strings.Repeat("x", 3<<20)}}, scope: ScopeWrite})
		expectLimit(t, r, http.StatusRequestEntityTooLarge, 1<<20, int64(3<<20+len(`{"params":{"who":""}}`)))
	})
}

// TestStrictInputs: null is not an object, a repeated query parameter is
// rejected, token names are printable identifiers.
func TestStrictInputs(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		h.srv.cfg.Runs = &fakeRuns{}
		h.deployExampleJob("hello")
		for _, body := range []string{"null", "[]", `"x"`, "1"} {
			r := h.do(req{method: "POST", path: "/jobs/hello/runs", body: body, scope: ScopeWrite})
			expectDetail(t, r, "body")
		}
		expectDetail(t, h.do(req{method: "GET", path: "/jobs?limit=1&limit=500", scope: ScopeRead}), "query", "limit")
		expect(t, h.do(req{method: "GET", path: "/jobs?limit=1", scope: ScopeRead}), http.StatusOK)
		for _, name := range []string{"evil\u202egnp", "tab\tname", "sp ace", "-dash", "ünï"} {
			r := h.do(req{method: "POST", path: "/tokens", body: map[string]any{"name": name}, scope: ScopeAdmin})
			expectDetail(t, r, "body", "name")
		}
		expect(t, h.do(req{method: "POST", path: "/tokens", body: map[string]any{"name": "ci-bot.1_x"}, scope: ScopeAdmin}), http.StatusCreated)
	})
}

// TestSignatureTimestamp: a timestamp header is covered by the signature
// and must lie within the tolerance of now.
func TestSignatureTimestamp(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		now := time.Date(2026, 11, 23, 17, 0, 0, 0, time.UTC)
		h.srv.cfg.Now = func() time.Time { return now }
		h.srv.cfg.IntegrationSecrets = map[string]string{"code_host": "s3cret"}
		const body = `{"repository":{"full_name":"acme/app"}}`
		sign := func(ts string) string {
			mac := hmac.New(sha256.New, []byte("s3cret"))
			if ts != "" {
				mac.Write([]byte(ts + "."))
			}
			mac.Write([]byte(body))
			return "sha256=" + hex.EncodeToString(mac.Sum(nil))
		}
		send := func(ts, sig string) response {
			hd := http.Header{"X-Signature-256": {sig}, "X-Event-Name": {"push"}}
			if ts != "" {
				hd.Set("X-Signature-Timestamp", ts)
			}
			return h.do(req{method: "POST", path: "/factory/integrations/code_host/events", body: body, scope: ScopeWrite, header: hd})
		}
		ts := strconv.FormatInt(now.Unix(), 10)
		old := strconv.FormatInt(now.Add(-DefaultSignatureTolerance-time.Second).Unix(), 10)
		// Without the header, the body alone is signed (no line listens: 404 after the check).
		expect(t, send("", sign("")), http.StatusNotFound)
		expect(t, send(ts, sign(ts)), http.StatusNotFound)
		// The body-only signature does not hold with a timestamp, nor one for another time.
		expectError(t, send(ts, sign("")), 401, CodeAuthRequired)
		expectError(t, send(ts, sign(old)), 401, CodeAuthRequired)
		// A replay outside the window fails though correctly signed.
		expectError(t, send(old, sign(old)), 401, CodeAuthRequired)
		expectError(t, send("yesterday", sign("yesterday")), 401, CodeAuthRequired)
	})
}
