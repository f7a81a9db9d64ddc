package store_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/linefactory/linefactory/store"
	"github.com/linefactory/linefactory/store/storetest"
)

func TestWorkersAndPlacements(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		if _, err := s.GetWorker(ctx, "w-a"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("unknown worker: got %v, want ErrNotFound", err)
		}
		started := time.Now().UTC().Add(-time.Minute).Truncate(time.Millisecond)
		if err := s.HeartbeatWorker(ctx, store.Worker{ID: "w-a", Queue: "linefactory/w-a", MaxSteps: 4, StartedAt: started}); err != nil {
			t.Fatal(err)
		}
		first, _ := s.GetWorker(ctx, "w-a")
		if err := s.HeartbeatWorker(ctx, store.Worker{ID: "w-a", Queue: "linefactory/w-a", MaxSteps: 8, StartedAt: started}); err != nil {
			t.Fatal(err)
		}
		w, err := s.GetWorker(ctx, "w-a")
		if err != nil || w.MaxSteps != 8 || w.Queue != "linefactory/w-a" || w.SeenAt.Before(first.SeenAt) {
			t.Fatalf("after a second beat: %+v %v (first seen %v)", w, err, first.SeenAt)
		}

		// Concurrent claims of one name agree on one holder.
		var wg sync.WaitGroup
		holders := make([]string, 8)
		for i := range holders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id := "w-a"
				if i%2 == 1 {
					id = "w-b"
				}
				h, err := s.PlaceSandbox(ctx, "box", id)
				if err != nil {
					t.Error(err)
				}
				holders[i] = h
			}()
		}
		wg.Wait()
		for _, h := range holders {
			if h != holders[0] {
				t.Fatalf("claims disagree: %v", holders)
			}
		}
		holder := holders[0]
		other := map[string]string{"w-a": "w-b", "w-b": "w-a"}[holder]
		if err := s.UnplaceSandbox(ctx, "box", other); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.SandboxWorker(ctx, "box"); got != holder {
			t.Fatalf("unplace by a non-holder removed the placement: holder %q", got)
		}
		if ok, err := s.MoveSandbox(ctx, "box", other, "w-c"); ok || err != nil {
			t.Fatalf("move from a non-holder: %v %v", ok, err)
		}
		if ok, err := s.MoveSandbox(ctx, "box", holder, "w-c"); !ok || err != nil {
			t.Fatalf("move from the holder: %v %v", ok, err)
		}
		if got, _ := s.SandboxWorker(ctx, "box"); got != "w-c" {
			t.Fatalf("after the move: holder %q, want w-c", got)
		}
		if err := s.UnplaceSandbox(ctx, "box", "w-c"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.SandboxWorker(ctx, "box"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("after unplace: %v, want ErrNotFound", err)
		}
	})
}
