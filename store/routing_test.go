package store_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/linefactory/linefactory/store"
)

// TestWaitingShape: a waiting line run's `waiting` has every field of the
// README's shape {transition_id, from, options, since, expires_at,
// router_error}, null when unset, and each option its label (null without one).
func TestWaitingShape(t *testing.T) {
	w := store.Waiting{TransitionID: "route", From: "a", Options: []store.WaitingOption{{Name: "fix", To: "b"}},
		Since: time.Unix(0, 0).UTC(), ExpiresAt: time.Unix(60, 0).UTC()}
	b, err := json.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"transition_id", "from", "options", "since", "expires_at", "router_error"} {
		if _, ok := got[k]; !ok {
			t.Errorf("waiting %s has no %q", b, k)
		}
	}
	if opt := got["options"].([]any)[0].(map[string]any); len(opt) != 3 || opt["label"] != nil {
		t.Errorf("option %v, want name, label (null), to", opt)
	}
}
