package api

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
)

// TestConcurrentSchedulePuts: concurrent upserts of one line's schedule all
// succeed, and the engine is handed the newest generation last.
func TestConcurrentSchedulePuts(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		runs := &fakeRuns{}
		h.srv.cfg.Runs = runs
		h.deployExampleJob("hello")
		line := "[line]\nname = \"rl\"\n[trigger]\ntype = \"manual\"\n[[stages]]\nid = \"s\"\njob = \"hello\"\n"
		expect(t, h.do(req{method: "POST", path: "/factory/lines/rl/deploy", body: line, contentType: "application/toml", scope: ScopeWrite}), 201)
		var wg sync.WaitGroup
		codes := make([]int, 8)
		for i := range codes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				codes[i] = h.do(req{method: "PUT", path: "/factory/lines/rl/schedule", scope: ScopeWrite,
					body: map[string]any{"cron": fmt.Sprintf("%d * * * *", i)}}).Status
			}()
		}
		wg.Wait()
		for i, c := range codes {
			if c != http.StatusOK {
				t.Fatalf("PUT %d answered %d", i, c)
			}
		}
		r := h.do(req{method: "GET", path: "/factory/lines/rl/schedule", scope: ScopeRead})
		stored := r.json(t)
		runs.mu.Lock()
		defer runs.mu.Unlock()
		last := runs.schedules[len(runs.schedules)-1]
		if float64(last.ScheduleGeneration) != stored["schedule_generation"] || last.Cron != stored["cron"] {
			t.Fatalf("engine last got generation %d (%s), the store has %v (%v)", last.ScheduleGeneration, last.Cron, stored["schedule_generation"], stored["cron"])
		}
	})
}
