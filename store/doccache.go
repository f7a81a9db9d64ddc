package store

import (
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// Finished runs' documents are what clients poll most (a dashboard, a CLI
// waiting on a result, a line's page) and, once a run is finished, they
// hardly change. GetJobRunJSON and GetLineRunJSON keep the documents of
// finished runs for Pool.FinishedRunCacheTTL, so repeated reads of one
// skip the database. Every write of a run through this store forgets the
// run's entry when it returns, so this process never serves what it has
// overwritten; a write by another process (a worker booking a late
// inference cost on a finished run, say) shows here within the TTL. A run
// that is not finished is never cached: its reads always go to the
// database.

// The cache's bounds: documents kept, their bytes in all, and the largest
// document kept (a run of thousands of steps is read from the database
// each time), so that many large finished runs read at once cannot fill
// the memory.
const (
	finishedRunCacheSize   = 4096
	finishedRunCacheBytes  = 32 << 20
	finishedRunCacheMaxDoc = 1 << 20
)

// docCache keeps finished runs' response documents by key (jobKey,
// lineKey). A nil *docCache keeps nothing. An expired document is dropped
// when next asked for (no goroutine sweeps them: the bounds above hold
// either way).
type docCache struct {
	ttl   time.Duration
	mu    sync.Mutex
	lru   *simplelru.LRU[string, cachedDoc]
	bytes int // of the documents in lru
	// gen grows with every write's forget: a read puts what it read only
	// if no write ended since the read began, so a document read just
	// before a write commits and put just after its forget is dropped.
	gen atomic.Uint64
}

type cachedDoc struct {
	doc     json.RawMessage
	expires time.Time
}

func newDocCache(ttl time.Duration) *docCache {
	if ttl <= 0 {
		return nil
	}
	c := &docCache{ttl: ttl}
	c.lru, _ = simplelru.NewLRU(finishedRunCacheSize, func(_ string, v cachedDoc) { c.bytes -= len(v.doc) })
	return c
}

func jobKey(id string) string  { return "j" + id }
func lineKey(id string) string { return "l" + id }

// get returns the document cached under key; ok is false when there is
// none, and then gen is what to hand put after reading the database.
func (c *docCache) get(key string) (doc json.RawMessage, gen uint64, ok bool) {
	if c == nil {
		return nil, 0, false
	}
	gen = c.gen.Load()
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.lru.Get(key)
	if ok && time.Now().After(e.expires) {
		c.lru.Remove(key)
		return nil, gen, false
	}
	return e.doc, gen, ok
}

// put keeps doc under key unless a write ended since gen was read. doc is
// shared by every later get: nobody may change it.
func (c *docCache) put(key string, doc json.RawMessage, gen uint64) {
	if c == nil || len(doc) > finishedRunCacheMaxDoc {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen.Load() != gen { // checked under the lock forget takes after counting
		return
	}
	c.lru.Remove(key)
	c.lru.Add(key, cachedDoc{doc: doc, expires: time.Now().Add(c.ttl)})
	c.bytes += len(doc)
	for c.bytes > finishedRunCacheBytes {
		c.lru.RemoveOldest()
	}
}

// forget drops key's document; every write of a run calls it when it has
// committed (or failed).
func (c *docCache) forget(key string) {
	if c == nil {
		return
	}
	c.gen.Add(1)
	c.mu.Lock()
	c.lru.Remove(key)
	c.mu.Unlock()
}
