package api

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/linefactory/linefactory/internal/testwait"
	"github.com/linefactory/linefactory/store"
)

// TestTokenRevocation: a token revoked through the API is refused at once;
// one removed behind the API's back (another API process) is refused within
// the token cache's lifetime.
func TestTokenRevocation(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		st := h.srv.store.(*store.Store)
		expect(t, h.do(req{method: "GET", path: "/jobs", scope: ScopeRead}), http.StatusOK)
		expect(t, h.do(req{method: "DELETE", path: "/tokens/test-read", scope: ScopeAdmin}), http.StatusNoContent)
		expectError(t, h.do(req{method: "GET", path: "/jobs", scope: ScopeRead}), http.StatusUnauthorized, CodeAuthRequired)

		expect(t, h.do(req{method: "GET", path: "/jobs", scope: ScopeWrite}), http.StatusOK) // cached now
		if err := st.DeleteToken(context.Background(), "test-write"); err != nil {
			t.Fatal(err)
		}
		revoked := time.Now()
		if !testwait.UntilEvery(tokenCacheTTL+3*time.Second, 50*time.Millisecond, func() bool {
			r := h.do(req{method: "GET", path: "/jobs", scope: ScopeWrite})
			if r.Status == http.StatusUnauthorized {
				return true
			}
			expect(t, r, http.StatusOK)
			return false
		}) {
			t.Fatalf("a token deleted %v ago still authenticates", time.Since(revoked))
		}
		if d := time.Since(revoked); d > tokenCacheTTL+time.Second {
			t.Fatalf("revocation took %v, the cache keeps tokens %v", d, tokenCacheTTL)
		}
	})
}

// TestTokenCacheHit: a known token is looked up once within the cache's
// lifetime, an unknown one every time.
func TestTokenCacheHit(t *testing.T) {
	var tc tokenCache
	calls := 0
	lookup := func(_ context.Context, key string) (store.Token, error) {
		calls++
		if key == "known" {
			return store.Token{ID: "tok_1", Name: "n", Scope: ScopeRead, Hash: key}, nil
		}
		return store.Token{}, store.ErrNotFound
	}
	for i := 0; i < 3; i++ {
		tok, err := tc.find(context.Background(), "known", lookup)
		if err != nil || tok.ID != "tok_1" {
			t.Fatalf("find: %v %v", tok, err)
		}
	}
	if calls != 1 {
		t.Fatalf("known token looked up %d times, want 1", calls)
	}
	for i := 0; i < 2; i++ {
		if _, err := tc.find(context.Background(), "unknown", lookup); err == nil {
			t.Fatal("unknown token found")
		}
	}
	if calls != 3 {
		t.Fatalf("unknown token lookups not repeated: %d calls, want 3", calls)
	}
	tc.purge()
	if _, err := tc.find(context.Background(), "known", lookup); err != nil || calls != 4 {
		t.Fatalf("after purge: %v, %d calls", err, calls)
	}
}

// TestTokenCacheTouchOnce: a cached token's use is recorded once per
// TokenTouchInterval however many requests share the lookup, again after
// the interval, and again at once when the write failed.
func TestTokenCacheTouchOnce(t *testing.T) {
	var tc tokenCache
	old := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	lookup := func(_ context.Context, key string) (store.Token, error) {
		return store.Token{ID: "tok_1", Hash: key, LastUsedAt: &old}, nil
	}
	ct, err := tc.find(context.Background(), "k", lookup)
	if err != nil {
		t.Fatal(err)
	}
	now := old.Add(store.TokenTouchInterval)
	claims := 0
	for i := 0; i < 100; i++ {
		if ok, _ := ct.claimTouch(now.Add(time.Duration(i) * time.Millisecond)); ok {
			claims++
		}
	}
	if claims != 1 {
		t.Fatalf("%d touches claimed within the interval, want 1", claims)
	}
	later := now.Add(store.TokenTouchInterval)
	ok, undo := ct.claimTouch(later)
	if !ok {
		t.Fatal("no touch claimed after the interval")
	}
	undo()
	if ok, _ := ct.claimTouch(later.Add(time.Millisecond)); !ok {
		t.Fatal("no touch claimed after a failed write")
	}
}

// TestTokenHashPooled: the request path's hash (an HMAC reused across
// requests) is the stored one, TokenKey.Hash, with and without a key, also
// when the same HMAC hashes several secrets in turn.
func TestTokenHashPooled(t *testing.T) {
	for _, key := range []TokenKey{nil, TokenKey("0123456789abcdef0123456789abcdef")} {
		s := New(Config{TokenKey: key}, nil)
		for i := 0; i < 3; i++ {
			for _, secret := range []string{"lf_a", NewTokenSecret(), ""} {
				if got, want := s.tokenHash(secret), key.Hash(secret); got != want {
					t.Fatalf("key %q, secret %q: tokenHash %s, TokenKey.Hash %s", key, secret, got, want)
				}
			}
		}
	}
}
