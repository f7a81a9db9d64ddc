package store

import (
	"encoding/json"
	"sync/atomic"
	"time"

	"github.com/hashicorp/golang-lru/v2/expirable"
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

// finishedRunCacheSize bounds the documents kept.
const finishedRunCacheSize = 4096

// docCache keeps finished runs' response documents by key (jobKey,
// lineKey). A nil *docCache keeps nothing.
type docCache struct {
	lru *expirable.LRU[string, json.RawMessage]
	// gen grows with every write's forget: a read puts what it read only
	// if no write ended since the read began, so a document read just
	// before a write commits and put just after its forget is dropped.
	gen atomic.Uint64
}

func newDocCache(ttl time.Duration) *docCache {
	if ttl <= 0 {
		return nil
	}
	return &docCache{lru: expirable.NewLRU[string, json.RawMessage](finishedRunCacheSize, nil, ttl)}
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
	doc, ok = c.lru.Get(key)
	return doc, gen, ok
}

// put keeps doc under key unless a write ended since gen was read. doc is
// shared by every later get: nobody may change it.
func (c *docCache) put(key string, doc json.RawMessage, gen uint64) {
	if c == nil || c.gen.Load() != gen {
		return
	}
	c.lru.Add(key, doc)
	if c.gen.Load() != gen { // a write ended meanwhile: its forget may have come first
		c.lru.Remove(key)
	}
}

// forget drops key's document; every write of a run calls it when it has
// committed (or failed).
func (c *docCache) forget(key string) {
	if c == nil {
		return
	}
	c.gen.Add(1)
	c.lru.Remove(key)
}
