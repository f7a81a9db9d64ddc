package api

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/linefactory/linefactory/store"
)

// fakeClock is a settable clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TestTokenLastUsedAt: a successful authentication records the token's
// use, at most once a minute; a failed one records nothing.
func TestTokenLastUsedAt(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		st := h.srv.store.(*store.Store)
		clock := &fakeClock{now: time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)}
		h.srv.cfg.Now = clock.Now
		lastUsed := func(scope string) *time.Time {
			t.Helper()
			tok, err := st.GetTokenByName(context.Background(), "test-"+scope)
			if err != nil {
				t.Fatal(err)
			}
			return tok.LastUsedAt
		}
		if lu := lastUsed(ScopeRead); lu != nil {
			t.Fatalf("unused token has last_used_at %v", lu)
		}
		t0 := clock.Now()
		expect(t, h.do(req{method: "GET", path: "/jobs", scope: ScopeRead}), http.StatusOK)
		if lu := lastUsed(ScopeRead); lu == nil || !lu.Equal(t0) {
			t.Fatalf("last_used_at %v, want %v", lu, t0)
		}
		clock.advance(30 * time.Second)
		expect(t, h.do(req{method: "GET", path: "/jobs", scope: ScopeRead}), http.StatusOK)
		if lu := lastUsed(ScopeRead); !lu.Equal(t0) {
			t.Fatalf("last_used_at written again within a minute: %v", lu)
		}
		clock.advance(31 * time.Second)
		expect(t, h.do(req{method: "GET", path: "/jobs", scope: ScopeRead}), http.StatusOK)
		if lu := lastUsed(ScopeRead); !lu.Equal(clock.Now()) {
			t.Fatalf("last_used_at %v, want %v", lu, clock.Now())
		}
		// A scope failure is still a use of a valid token; others are untouched.
		expectError(t, h.do(req{method: "GET", path: "/tokens", scope: ScopeRead}), http.StatusForbidden, CodeAccessDenied)
		if lu := lastUsed(ScopeWrite); lu != nil {
			t.Fatalf("write token never used has last_used_at %v", lu)
		}
		// The admin list shows it.
		r := h.do(req{method: "GET", path: "/tokens", scope: ScopeAdmin})
		expect(t, r, http.StatusOK)
		for _, tok := range r.list(t) {
			if tok["name"] == "test-read" && tok["last_used_at"] == nil {
				t.Fatalf("token list: %s", r.Body)
			}
		}
	})
}

// TestInputLengths: values longer than their stored column are 422 with
// the location, on both stores.
func TestInputLengths(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		kn := func(id, format string) map[string]any {
			return map[string]any{"identifier": id, "type": "prompt", "level": "prompt", "format": format, "body": "x"}
		}
		expectDetail(t, h.do(req{method: "POST", path: "/knowledge", body: kn(strings.Repeat("a", 129), "text"), scope: ScopeWrite}), "body", "identifier")
		expectDetail(t, h.do(req{method: "POST", path: "/knowledge", body: kn("a", strings.Repeat("f", 65)), scope: ScopeWrite}), "body", "format")
		expect(t, h.do(req{method: "POST", path: "/knowledge", body: kn(strings.Repeat("a", 128), strings.Repeat("f", 64)), scope: ScopeWrite}), http.StatusCreated)
		expectDetail(t, h.do(req{method: "POST", path: "/knowledge/" + strings.Repeat("a", 128) + "/versions", body: kn(strings.Repeat("a", 128), strings.Repeat("f", 65)), scope: ScopeWrite}), "body", "format")
		expectDetail(t, h.do(req{method: "POST", path: "/tokens", body: map[string]any{"name": strings.Repeat("n", 129)}, scope: ScopeAdmin}), "body", "name")
		expect(t, h.do(req{method: "POST", path: "/tokens", body: map[string]any{"name": strings.Repeat("n", 128)}, scope: ScopeAdmin}), http.StatusCreated)
	})
}

// TestKnowledgeVersionIdentifierInBody: the body may repeat the path's
// identifier; a different one is 422.
func TestKnowledgeVersionIdentifierInBody(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		body := map[string]any{"identifier": "guide", "type": "prompt", "level": "prompt", "format": "text", "body": "v1"}
		expect(t, h.do(req{method: "POST", path: "/knowledge", body: body, scope: ScopeWrite}), http.StatusCreated)
		body["body"] = "v2"
		r := h.do(req{method: "POST", path: "/knowledge/guide/versions", body: body, scope: ScopeWrite})
		expect(t, r, http.StatusCreated)
		if v := r.json(t); v["version_number"] != 2.0 || v["identifier"] != "guide" {
			t.Fatalf("version with the identifier repeated: %s", r.Body)
		}
		body["identifier"] = "other"
		body["body"] = "v3"
		expectDetail(t, h.do(req{method: "POST", path: "/knowledge/guide/versions", body: body, scope: ScopeWrite}), "body", "identifier")
	})
}

// TestListsInByteOrderOverAPI: jobs, lines and knowledge list in byte order
// on both stores.
func TestListsInByteOrderOverAPI(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		hello := readExample(t, "jobs/hello/job.toml")
		for _, n := range []string{"ab", "a_b", "aB", "a-b"} {
			body := strings.Replace(hello, `name = "hello"`, `name = "`+n+`"`, 1)
			expect(t, h.do(req{method: "POST", path: "/jobs/" + n + "/versions", body: body, contentType: "application/toml", scope: ScopeWrite}), http.StatusCreated)
			line := map[string]any{"line": map[string]any{"name": n}, "trigger": map[string]any{"type": "manual"}, "stages": []any{map[string]any{"id": "s", "job": n}}}
			expect(t, h.do(req{method: "POST", path: "/factory/lines/" + n + "/deploy", body: map[string]any{"manifest": line}, scope: ScopeWrite}), http.StatusCreated)
		}
		for _, id := range []string{"aa", "a0", "a-b"} {
			expect(t, h.do(req{method: "POST", path: "/knowledge", body: map[string]any{"identifier": id, "type": "prompt", "level": "prompt", "format": "text", "body": "x"}, scope: ScopeWrite}), http.StatusCreated)
		}
		names := func(path, key string) string {
			r := h.do(req{method: "GET", path: path, scope: ScopeRead})
			expect(t, r, http.StatusOK)
			var out []string
			for _, it := range r.list(t) {
				out = append(out, it[key].(string))
			}
			return strings.Join(out, " ")
		}
		if got, want := names("/jobs", "name"), "a-b aB a_b ab"; got != want {
			t.Errorf("jobs %q, want %q", got, want)
		}
		if got, want := names("/factory/lines", "name"), "a-b aB a_b ab"; got != want {
			t.Errorf("lines %q, want %q", got, want)
		}
		if got, want := names("/knowledge", "identifier"), "a-b a0 aa"; got != want {
			t.Errorf("knowledge %q, want %q", got, want)
		}
	})
}
