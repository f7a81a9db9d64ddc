package main

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/linefactory/linefactory/manifests/run"
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

// benchTrue is the bare-Temporal baseline's step: run `true`.
func benchTrue(ctx context.Context) error { return exec.CommandContext(ctx, "true").Run() }

// bareStage is one stage of the baseline: a workflow with one activity.
func bareStage(ctx workflow.Context) error {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
	return workflow.ExecuteActivity(ctx, "BenchTrue").Get(ctx, nil)
}

// bareThree is the baseline of a three-stage line: three child workflows
// in sequence.
func bareThree(ctx workflow.Context) error {
	for i := 0; i < 3; i++ {
		if err := workflow.ExecuteChildWorkflow(ctx, "BenchBareStage").Get(ctx, nil); err != nil {
			return err
		}
	}
	return nil
}

// BenchmarkLineRuns runs 20 three-stage lines of one-step jobs at once and
// reports line runs per second, then the same work as bare Temporal
// workflows (three child workflows of one activity each) on the same
// server, and the ratio of the two.
func BenchmarkLineRuns(b *testing.B) {
	d := startDaemon(b, b.TempDir(), nil)
	d.deploy("one", "[job]\nname = \"one\"\n[[run.tasks]]\nname = \"t\"\n[[run.tasks.steps]]\nexec = [\"true\"]\n")
	line := "[line]\nname = \"three\"\n[trigger]\ntype = \"manual\"\n" +
		"[[stages]]\nid = \"a\"\njob = \"one\"\n[[stages]]\nid = \"b\"\njob = \"one\"\n[[stages]]\nid = \"c\"\njob = \"one\"\n" +
		"[[transitions]]\ntype = \"conditional\"\nid = \"ab\"\nfrom = \"a\"\nto = \"b\"\nwhen = { op = \"always\" }\n" +
		"[[transitions]]\ntype = \"conditional\"\nid = \"bc\"\nfrom = \"b\"\nto = \"c\"\nwhen = { op = \"always\" }\n"
	if code, m := d.call("POST", "/factory/lines/three/deploy", "application/toml", []byte(line)); code != 201 {
		b.Fatalf("deploy: %d %v", code, m)
	}
	c := temporalClient(b, d)
	w := worker.New(c, "bench-bare", worker.Options{})
	w.RegisterWorkflowWithOptions(bareThree, workflow.RegisterOptions{Name: "BenchBareThree"})
	w.RegisterWorkflowWithOptions(bareStage, workflow.RegisterOptions{Name: "BenchBareStage"})
	w.RegisterActivityWithOptions(benchTrue, activity.RegisterOptions{Name: "BenchTrue"})
	if err := w.Start(); err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	const n = 20
	// Both sides start their n runs at once and wait on the workflow
	// results the same way (a line run's result follows its
	// continue-as-new turns); the line records are checked after timing.
	waitAll := func(ids []string) {
		var wg sync.WaitGroup
		for _, id := range ids {
			wg.Add(1)
			go func(id string) {
				defer wg.Done()
				if err := c.GetWorkflow(context.Background(), id, "").Get(context.Background(), nil); err != nil {
					b.Error(err)
				}
			}(id)
		}
		wg.Wait()
	}
	runLines := func() time.Duration {
		start := time.Now()
		ids := make([]string, n)
		var wg sync.WaitGroup
		for i := range ids {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				_, m := d.call("POST", "/factory/lines/three/runs", "application/json", nil)
				ids[i], _ = m["id"].(string)
			}(i)
		}
		wg.Wait()
		wids := make([]string, n)
		for i, id := range ids {
			wids[i] = run.LineRunWorkflowID(id)
		}
		waitAll(wids)
		elapsed := time.Since(start)
		for _, id := range ids {
			if _, run := d.call("GET", "/factory/line-runs/"+id, "", nil); run["status"] != "succeeded" {
				b.Fatalf("line run %v", run)
			}
		}
		return elapsed
	}
	runBare := func() time.Duration {
		start := time.Now()
		ids := make([]string, n)
		var wg sync.WaitGroup
		for i := range ids {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				r, err := c.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{TaskQueue: "bench-bare"}, "BenchBareThree")
				if err != nil {
					b.Error(err)
					return
				}
				ids[i] = r.GetID()
			}(i)
		}
		wg.Wait()
		waitAll(ids)
		return time.Since(start)
	}
	runLines()
	runBare() // warm up both
	b.ResetTimer()
	var lineTime, bareTime time.Duration
	for i := 0; i < b.N; i++ {
		lineTime += runLines()
		bareTime += runBare()
	}
	lineRate := float64(n*b.N) / lineTime.Seconds()
	bareRate := float64(n*b.N) / bareTime.Seconds()
	b.ReportMetric(lineRate, "line-runs/s")
	b.ReportMetric(bareRate, "bare-runs/s")
	b.ReportMetric(lineRate/bareRate, "ratio")
}
