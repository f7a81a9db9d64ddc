package store

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

// TestDocCacheRace: a document read before a write committed is not kept
// when the write's forget came between the read and the put; a document
// put is kept until forgotten; a nil cache (TTL 0) keeps nothing.
func TestDocCacheRace(t *testing.T) {
	c := newDocCache(time.Minute)
	_, gen, ok := c.get("jx")
	if ok {
		t.Fatal("empty cache has jx")
	}
	c.forget("jx") // the write ends after the read began
	c.put("jx", json.RawMessage(`{"old":1}`), gen)
	if _, _, ok := c.get("jx"); ok {
		t.Fatal("a document read before a write was kept after it")
	}
	_, gen, _ = c.get("jx")
	c.put("jx", json.RawMessage(`{"new":1}`), gen)
	if doc, _, ok := c.get("jx"); !ok || string(doc) != `{"new":1}` {
		t.Fatalf("got %s %v, want the document put", doc, ok)
	}
	c.forget("jx")
	if _, _, ok := c.get("jx"); ok {
		t.Fatal("forget left the document")
	}
	none := newDocCache(0)
	_, gen, _ = none.get("jx")
	none.put("jx", json.RawMessage(`{}`), gen)
	none.forget("jx")
	if _, _, ok := none.get("jx"); ok {
		t.Fatal("a nil cache kept a document")
	}
}

// TestDocCacheBounds: a document past finishedRunCacheMaxDoc is not kept,
// the documents kept never hold more than finishedRunCacheBytes (the
// oldest go), and an expired one is not served.
func TestDocCacheBounds(t *testing.T) {
	c := newDocCache(time.Minute)
	_, gen, _ := c.get("jbig")
	c.put("jbig", make(json.RawMessage, finishedRunCacheMaxDoc+1), gen)
	if _, _, ok := c.get("jbig"); ok {
		t.Fatal("a document past the largest kept was kept")
	}
	doc := make(json.RawMessage, finishedRunCacheMaxDoc)
	n := finishedRunCacheBytes/len(doc) + 3
	for i := range n {
		c.put(fmt.Sprintf("j%d", i), doc, gen)
		c.put(fmt.Sprintf("j%d", i), doc, gen) // again: counted once
		if c.bytes > finishedRunCacheBytes || c.bytes != c.lru.Len()*len(doc) {
			t.Fatalf("after %d documents: %d bytes for %d kept", i+1, c.bytes, c.lru.Len())
		}
	}
	if _, _, ok := c.get("j0"); ok {
		t.Fatal("the oldest document stayed past the bytes bound")
	}
	if _, _, ok := c.get(fmt.Sprintf("j%d", n-1)); !ok {
		t.Fatal("the newest document went")
	}
	short := newDocCache(time.Millisecond)
	_, gen, _ = short.get("jx")
	short.put("jx", json.RawMessage(`{}`), gen)
	time.Sleep(5 * time.Millisecond)
	if _, _, ok := short.get("jx"); ok || short.bytes != 0 {
		t.Fatalf("an expired document was served (or its bytes kept: %d)", short.bytes)
	}
}
