package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/linefactory/linefactory/manifests/manifesttest"
)

// BenchmarkScaleOutJobRuns starts 60 one-step job runs at once against one
// API process and 1 or 3 worker processes on this machine (a Temporal server
// hosted by the test, a shared SQLite store or PostgreSQL schema) and
// reports job runs completed per second.
func BenchmarkScaleOutJobRuns(b *testing.B) {
	for _, workers := range []int{1, 3} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			c := startScaleCluster(b, workers)
			c.api.deploy("one", manifesttest.OneStepJob("one", "", `["true"]`))
			c.api.wait(c.api.start("one", nil), time.Minute) // warm up
			const n = 60
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				for _, id := range startMany(c.api, "one", n) {
					if run := c.api.wait(id, 5*time.Minute); run["status"] != "succeeded" {
						b.Fatalf("run %v", run)
					}
				}
			}
			b.ReportMetric(float64(n*b.N)/time.Since(start).Seconds(), "runs/s")
		})
	}
}
