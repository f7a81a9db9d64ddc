package sandbox

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/linefactory/linefactory/internal/cpuclock"
)

// BenchmarkExecCost measures what one command costs through Local.Exec:
// `true`, costExecs times per sample, in an online and an offline sandbox,
// isolated (bwrap) and not (none), the four interleaved (A B C D A B C D …)
// costSamples times after a warm-up. It prints the median per command and
// the range of the samples, and the isolation's cost (bwrap − none).
//
//	go test -run '^$' -bench ExecCost -benchtime 1x ./activities/sandbox/
func BenchmarkExecCost(b *testing.B) {
	if b.N > 1 {
		b.Skip("run with -benchtime 1x: one pass measures everything")
	}
	if err := CheckIsolation(); err != nil {
		b.Skipf("SKIPPING: this host cannot isolate sandboxes: %v", err)
	}
	cs := costSetups(b)
	res := make([][]float64, len(cs))
	cpu := make([][]float64, len(cs))
	for s := -1; s < costSamples; s++ {
		for i, c := range cs {
			cpu0 := cpuclock.Ms()
			ms, err := ExecCost(context.Background(), c.l, c.name, costExecs)
			if err != nil {
				b.Fatalf("%s: %v", c.label, err)
			}
			if s >= 0 { // the first round warms up
				res[i] = append(res[i], ms)
				cpu[i] = append(cpu[i], (cpuclock.Ms()-cpu0)/costExecs)
			}
		}
	}
	med := make([]float64, len(cs))
	for i, c := range cs {
		s := slices.Clone(res[i])
		slices.Sort(s)
		med[i] = s[len(s)/2]
		slices.Sort(cpu[i])
		fmt.Printf("%-16s %6.2f ms per command (samples %.2f–%.2f), CPU %.2f ms\n", c.label, med[i], s[0], s[len(s)-1], cpu[i][len(cpu[i])/2])
		b.ReportMetric(med[i], c.metric)
	}
	fmt.Printf("isolation cost per command (bwrap − none): online %.2f ms, offline %.2f ms\n", med[0]-med[2], med[1]-med[3])
}

const (
	costSamples = 5
	costExecs   = 20
)

type costSetup struct {
	label, metric, name string
	l                   *Local
}

// costSetups are the four drivers × networks, each with its sandbox.
func costSetups(b *testing.B) []costSetup {
	var cs []costSetup
	for _, iso := range []string{IsolationBwrap, IsolationNone} {
		l, err := NewLocalWith(b.TempDir(), Options{Isolation: iso})
		if err != nil {
			b.Fatal(err)
		}
		for _, online := range []bool{true, false} {
			net := map[bool]string{true: "online", false: "offline"}[online]
			sb, err := l.Acquire(context.Background(), Spec{Mode: "provision", Name: "cost-" + net, InternetEnabled: online})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = l.Delete(context.Background(), sb.Name) })
			cs = append(cs, costSetup{label: iso + " " + net, metric: "ms/" + iso + "-" + net, name: sb.Name, l: l})
		}
	}
	// bwrap online, bwrap offline, none online, none offline
	return cs
}

// ExecCost runs `true` n times in a sandbox and returns the mean wall time
// of one Exec in milliseconds.
func ExecCost(ctx context.Context, l *Local, name string, n int) (float64, error) {
	t0 := time.Now()
	for i := 0; i < n; i++ {
		res, err := l.Exec(ctx, ExecRequest{Sandbox: name, Argv: []string{"true"}})
		if err != nil {
			return 0, err
		}
		if res.ExitCode != 0 {
			return 0, fmt.Errorf("true exited %d", res.ExitCode)
		}
	}
	return float64(time.Since(t0).Microseconds()) / 1000 / float64(n), nil
}

// BenchmarkOnlineProvisionCost measures the CPU time (this process and its
// reaped children: bwrap, slirp4netns, …) of an online isolated sandbox's
// life: Acquire, its first command (`true`, which makes its network
// namespace, attaches slirp4netns and blocks the host) and Delete. It
// prints the median per sandbox over provisionSamples samples of
// provisionRuns sandboxes each, after a warm-up.
//
//	go test -run '^$' -bench OnlineProvisionCost -benchtime 1x ./activities/sandbox/
func BenchmarkOnlineProvisionCost(b *testing.B) {
	if b.N > 1 {
		b.Skip("run with -benchtime 1x: one pass measures everything")
	}
	if err := CheckIsolation(); err != nil {
		b.Skipf("SKIPPING: this host cannot isolate sandboxes: %v", err)
	}
	l, err := NewLocalWith(b.TempDir(), Options{Isolation: IsolationBwrap})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(l.Close)
	ctx := context.Background()
	var cpu, wall []float64
	for s := -1; s < provisionSamples; s++ {
		cpu0, t0 := cpuclock.Ms(), time.Now()
		for i := 0; i < provisionRuns; i++ {
			sb, err := l.Acquire(ctx, Spec{Mode: "provision", Name: fmt.Sprintf("online-%d-%d", s+1, i), InternetEnabled: true})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := ExecCost(ctx, l, sb.Name, 1); err != nil {
				b.Fatal(err)
			}
			if err := l.Delete(ctx, sb.Name); err != nil {
				b.Fatal(err)
			}
		}
		if s >= 0 { // the first sample warms up
			cpu = append(cpu, (cpuclock.Ms()-cpu0)/provisionRuns)
			wall = append(wall, float64(time.Since(t0).Microseconds())/1000/provisionRuns)
		}
	}
	slices.Sort(cpu)
	slices.Sort(wall)
	fmt.Printf("online sandbox Acquire+Exec(true)+Delete: CPU %.2f ms (samples %.2f–%.2f), wall %.2f ms\n",
		cpu[len(cpu)/2], cpu[0], cpu[len(cpu)-1], wall[len(wall)/2])
	b.ReportMetric(cpu[len(cpu)/2], "cpu-ms/sandbox")
}

const (
	provisionSamples = 5
	provisionRuns    = 10
)
