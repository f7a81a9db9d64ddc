package api

import (
	"net/http"
	"testing"
)

// SPEC's job run `region` is the run's region: the job's `run.region`, known
// when the run is created, so the 201 of a start already carries it (it was
// null there and set only once the run started); a job without one is null.
func TestJobRunRegionAtCreation(t *testing.T) {
	h := newHarness(t, storetestSQLite(t))
	h.srv.cfg.Runs = &fakeRuns{}
	for name, region := range map[string]string{"regional": "\nregion = \"eu-west-1\"", "anywhere": ""} {
		manifest := "[job]\nname = \"" + name + "\"\n\n[run]" + region + "\n\n[[run.tasks]]\nname = \"t\"\n\n[[run.tasks.steps]]\nexec = [\"true\"]\n"
		expect(t, h.do(req{method: "POST", path: "/jobs/" + name + "/versions", body: manifest, contentType: "application/toml", scope: ScopeWrite}), http.StatusCreated)
	}
	r := h.do(req{method: "POST", path: "/jobs/regional/runs", scope: ScopeWrite})
	expect(t, r, http.StatusCreated)
	started := r.json(t)
	if started["status"] != "queued" || started["region"] != "eu-west-1" {
		t.Fatalf("201 of a start: status %v region %v, want queued eu-west-1", started["status"], started["region"])
	}
	got := h.do(req{method: "GET", path: "/job-runs/" + started["id"].(string), scope: ScopeRead}).json(t)
	if got["region"] != "eu-west-1" {
		t.Fatalf("GET of the queued run: region %v", got["region"])
	}
	r = h.do(req{method: "POST", path: "/jobs/anywhere/runs", scope: ScopeWrite})
	expect(t, r, http.StatusCreated)
	if region, ok := r.json(t)["region"]; !ok || region != nil {
		t.Fatalf("a job without run.region: region %v (present %v), want null", region, ok)
	}
}
