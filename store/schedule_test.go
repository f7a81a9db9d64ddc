package store_test

import (
	"errors"
	"testing"

	"github.com/linefactory/linefactory/store"
	"github.com/linefactory/linefactory/store/storetest"
)

// A line's schedule generation never repeats: deleting the schedule and
// putting a new one continues the count, so a firing of the old schedule
// cannot pass for one of the new.
func TestLineScheduleGenerationMonotonicAcrossDelete(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, s *store.Store) {
		sc := store.LineSchedule{LineName: "flow", Cron: "0 * * * *", Timezone: "UTC", Enabled: true}
		first, err := s.UpsertLineSchedule(ctx, sc)
		if err != nil || first.ScheduleGeneration != 1 {
			t.Fatalf("create: %+v %v", first, err)
		}
		seen := map[int64]bool{first.ScheduleGeneration: true}
		last := first.ScheduleGeneration
		for i := 0; i < 3; i++ {
			if err := s.DeleteLineSchedule(ctx, "flow"); err != nil {
				t.Fatal(err)
			}
			if _, err := s.GetLineSchedule(ctx, "flow"); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("get after delete: %v, want not found", err)
			}
			if err := s.DeleteLineSchedule(ctx, "flow"); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("second delete: %v, want not found", err)
			}
			if all, err := s.ListLineSchedules(ctx); err != nil || len(all) != 0 {
				t.Fatalf("list after delete: %+v %v", all, err)
			}
			// The same schedule again is a new one: a new generation.
			got, err := s.UpsertLineSchedule(ctx, sc)
			if err != nil {
				t.Fatal(err)
			}
			if got.ScheduleGeneration <= last || seen[got.ScheduleGeneration] {
				t.Fatalf("re-created schedule has generation %d after %d", got.ScheduleGeneration, last)
			}
			seen[got.ScheduleGeneration], last = true, got.ScheduleGeneration
			cur, err := s.GetLineSchedule(ctx, "flow")
			if err != nil || cur.ScheduleGeneration != last || !cur.Enabled || cur.Cron != sc.Cron {
				t.Fatalf("get after re-create: %+v %v", cur, err)
			}
		}
		// An unchanged upsert of a live schedule still keeps its generation.
		again, err := s.UpsertLineSchedule(ctx, sc)
		if err != nil || again.ScheduleGeneration != last {
			t.Fatalf("unchanged upsert: %+v %v, want generation %d", again, err, last)
		}
		// Other lines count on their own.
		other, err := s.UpsertLineSchedule(ctx, store.LineSchedule{LineName: "other", Cron: "0 * * * *", Timezone: "UTC", Enabled: true})
		if err != nil || other.ScheduleGeneration != 1 {
			t.Fatalf("other line: %+v %v", other, err)
		}
	})
}
