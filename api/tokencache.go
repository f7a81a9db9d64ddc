package api

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/golang-lru/v2/expirable"

	"github.com/linefactory/linefactory/store"
)

// Token cache bounds: a token found by its hash is reused for
// tokenCacheTTL, so a revoked token stops working within that time on every
// API process (at once on the process that revoked it); at most
// tokenCacheSize tokens are kept.
const (
	tokenCacheTTL  = 2 * time.Second
	tokenCacheSize = 1024
)

// tokenCache saves the token SELECT on every authenticated request. It is
// keyed by the store's lookup key (the token hash); unknown tokens are
// never cached, so a new token works at once.
type tokenCache struct {
	once sync.Once
	lru  *expirable.LRU[string, *cachedToken]
}

// cachedToken is a token as looked up, and when this process last recorded
// its use. The cached LastUsedAt is as old as the lookup, so deciding on it
// alone would write the use on every request of the lookup's lifetime once
// TokenTouchInterval had passed.
type cachedToken struct {
	store.Token
	touched atomic.Int64 // UnixNano of the last recorded use; 0 none
}

func (tc *tokenCache) init() {
	tc.once.Do(func() { tc.lru = expirable.NewLRU[string, *cachedToken](tokenCacheSize, nil, tokenCacheTTL) })
}

// get returns the token cached under key, if any.
func (tc *tokenCache) get(key string) (*cachedToken, bool) {
	tc.init()
	return tc.lru.Get(key)
}

// find returns the token stored under key, from the cache when it was
// looked up less than tokenCacheTTL ago.
func (tc *tokenCache) find(ctx context.Context, key string, lookup func(context.Context, string) (store.Token, error)) (*cachedToken, error) {
	tc.init()
	if ct, ok := tc.lru.Get(key); ok {
		return ct, nil
	}
	tok, err := lookup(ctx, key)
	if err != nil {
		return nil, err
	}
	ct := &cachedToken{Token: tok}
	if tok.LastUsedAt != nil {
		ct.touched.Store(tok.LastUsedAt.UnixNano())
	}
	tc.lru.Add(key, ct)
	return ct, nil
}

// claimTouch tells whether the caller is to record a use at now: when no
// use was recorded within TokenTouchInterval, exactly one of concurrent
// callers gets true. undo, called when the write failed, lets the next
// request try again.
func (ct *cachedToken) claimTouch(now time.Time) (ok bool, undo func()) {
	last := ct.touched.Load()
	if last != 0 && now.Sub(time.Unix(0, last)) < store.TokenTouchInterval {
		return false, nil
	}
	if !ct.touched.CompareAndSwap(last, now.UnixNano()) {
		return false, nil
	}
	return true, func() { ct.touched.CompareAndSwap(now.UnixNano(), last) }
}

// purge forgets every cached token (a token was revoked here).
func (tc *tokenCache) purge() {
	tc.init()
	tc.lru.Purge()
}
