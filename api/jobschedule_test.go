package api

import (
	"net/http"
	"strings"
	"testing"

	"github.com/linefactory/linefactory/manifests/manifesttest"
	"github.com/linefactory/linefactory/workflows"
)

var scheduledJob = manifesttest.Job("scheduled")

// TestJobDeployKeepsScheduleInStep: a job version with [schedule] has the
// engine fire it for that version (again on an identical redeploy, to
// repair), paused when disabled; a version without one drops it.
func TestJobDeployKeepsScheduleInStep(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		runs := &fakeRuns{}
		h.srv.cfg.Runs = runs
		deploy := func(body string, want int) map[string]any {
			t.Helper()
			r := h.do(req{method: "POST", path: "/jobs/tick/versions", body: body, contentType: "application/toml", scope: ScopeWrite})
			expect(t, r, want)
			return r.json(t)
		}
		last := func() (workflows.JobSchedule, int, []string) {
			runs.mu.Lock()
			defer runs.mu.Unlock()
			if len(runs.jobSchedules) == 0 {
				return workflows.JobSchedule{}, 0, append([]string(nil), runs.jobDeleted...)
			}
			return runs.jobSchedules[len(runs.jobSchedules)-1], len(runs.jobSchedules), append([]string(nil), runs.jobDeleted...)
		}

		withSchedule := scheduledJob + "\n[schedule]\ncron = \"*/5 * * * *\"\n"
		v1 := deploy(withSchedule, http.StatusCreated)
		sc, n, deleted := last()
		want := workflows.JobSchedule{JobName: "tick", JobVersionID: v1["id"].(string), Cron: "*/5 * * * *", Timezone: "UTC", Enabled: true}
		if n != 1 || sc != want || len(deleted) != 0 {
			t.Fatalf("after deploy: %d schedules, last %+v, deleted %v; want %+v", n, sc, deleted, want)
		}
		// An identical redeploy hands the same schedule to the engine again.
		deploy(withSchedule, http.StatusOK)
		if sc, n, _ := last(); n != 2 || sc != want {
			t.Fatalf("after redeploy: %d schedules, last %+v", n, sc)
		}
		// A disabled schedule in another timezone: the engine gets it paused,
		// for the new version.
		disabled := scheduledJob + "\n[schedule]\ncron = \"0 3 * * *\"\ntimezone = \"Europe/Berlin\"\nenabled = false\n"
		v2 := deploy(disabled, http.StatusCreated)
		want = workflows.JobSchedule{JobName: "tick", JobVersionID: v2["id"].(string), Cron: "0 3 * * *", Timezone: "Europe/Berlin", Enabled: false}
		if sc, n, _ := last(); n != 3 || sc != want {
			t.Fatalf("after disabled deploy: %d schedules, last %+v, want %+v", n, sc, want)
		}
		// A version without [schedule] drops it.
		deploy(scheduledJob, http.StatusCreated)
		if _, n, deleted := last(); n != 3 || len(deleted) != 1 || deleted[0] != "tick" {
			t.Fatalf("after unscheduled deploy: %d schedules, deleted %v", n, deleted)
		}
		// A param without a default cannot be scheduled: refused, nothing
		// reaches the engine.
		bad := strings.Replace(withSchedule, `default = "world"`, "", 1)
		r := h.do(req{method: "POST", path: "/jobs/tick/versions", body: bad, contentType: "application/toml", scope: ScopeWrite})
		if r.Status != http.StatusUnprocessableEntity {
			t.Fatalf("schedule without defaults: %d %s", r.Status, r.Body)
		}
		if _, n, deleted := last(); n != 3 || len(deleted) != 1 {
			t.Fatalf("after refused deploy: %d schedules, deleted %v", n, deleted)
		}
	})
}
