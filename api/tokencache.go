package api

import (
	"context"
	"sync"
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
	lru  *expirable.LRU[string, store.Token]
}

func (tc *tokenCache) init() {
	tc.once.Do(func() { tc.lru = expirable.NewLRU[string, store.Token](tokenCacheSize, nil, tokenCacheTTL) })
}

// find returns the token stored under key, from the cache when it was
// looked up less than tokenCacheTTL ago.
func (tc *tokenCache) find(ctx context.Context, key string, lookup func(context.Context, string) (store.Token, error)) (store.Token, error) {
	tc.init()
	if tok, ok := tc.lru.Get(key); ok {
		return tok, nil
	}
	tok, err := lookup(ctx, key)
	if err != nil {
		return tok, err
	}
	tc.lru.Add(key, tok)
	return tok, nil
}

// purge forgets every cached token (a token was revoked here).
func (tc *tokenCache) purge() {
	tc.init()
	tc.lru.Purge()
}
