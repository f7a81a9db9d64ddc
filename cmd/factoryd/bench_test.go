package main

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

func parseTime(t testing.TB, v any) time.Time {
	t.Helper()
	ts, err := time.Parse(time.RFC3339Nano, fmt.Sprint(v))
	if err != nil {
		t.Fatalf("time %v: %v", v, err)
	}
	return ts
}

// BenchmarkStepOverhead runs a job of 20 `true` steps on the embedded server
// and reports the orchestration overhead per step: the run's wall time minus
// the time spent in the steps themselves, divided by 20.
func BenchmarkStepOverhead(b *testing.B) {
	d := startDaemon(b, b.TempDir(), nil)
	var job strings.Builder
	job.WriteString("[job]\nname = \"twenty\"\n[[run.tasks]]\nname = \"t\"\n")
	for i := 0; i < 20; i++ {
		job.WriteString("[[run.tasks.steps]]\nexec = [\"true\"]\n")
	}
	d.deploy("twenty", job.String())
	d.wait(d.start("twenty", nil), time.Minute) // warm up
	b.ResetTimer()
	var overhead time.Duration
	for i := 0; i < b.N; i++ {
		run := d.wait(d.start("twenty", nil), time.Minute)
		if run["status"] != "succeeded" {
			b.Fatalf("run %v", run)
		}
		wall := parseTime(b, run["completed_at"]).Sub(parseTime(b, run["started_at"]))
		var inSteps time.Duration
		for _, e := range run["step_timeline"].([]any) {
			e := e.(map[string]any)
			inSteps += parseTime(b, e["completed_at"]).Sub(parseTime(b, e["started_at"]))
		}
		overhead += wall - inSteps
	}
	b.ReportMetric(float64(overhead.Microseconds())/1000/20/float64(b.N), "ms-overhead/step")
}

// BenchmarkJobRunThroughput starts 50 one-step job runs at once and reports
// job runs completed per second.
func BenchmarkJobRunThroughput(b *testing.B) {
	d := startDaemon(b, b.TempDir(), nil)
	d.deploy("one", "[job]\nname = \"one\"\n[[run.tasks]]\nname = \"t\"\n[[run.tasks.steps]]\nexec = [\"true\"]\n")
	d.wait(d.start("one", nil), time.Minute)
	const n = 50
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		ids := make([]string, n)
		var wg sync.WaitGroup
		for j := range ids {
			wg.Add(1)
			go func(j int) { defer wg.Done(); ids[j] = d.start("one", nil) }(j)
		}
		wg.Wait()
		for _, id := range ids {
			if run := d.wait(id, 5*time.Minute); run["status"] != "succeeded" {
				b.Fatalf("run %v", run)
			}
		}
	}
	b.ReportMetric(float64(n*b.N)/time.Since(start).Seconds(), "runs/s")
}
