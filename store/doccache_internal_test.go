package store

import (
	"encoding/json"
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
