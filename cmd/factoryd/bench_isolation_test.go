package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/linefactory/linefactory/activities/sandbox"
)

// benchIsolationExecs is how many `true` commands make one sample of the
// isolation row.
const benchIsolationExecs = 20

// isolationCost: what the sandbox boundary adds to every command, `true`
// run through the local driver's Exec with FACTORY_SANDBOX_ISOLATION=bwrap
// and =none, in an online and an offline sandbox, interleaved (bwrap, none,
// bwrap, none …), the difference taken per pair: commands on their own (a
// bwrap each), and commands told another follows soon, as a job's steps
// are (with bwrap they enter the sandbox's holder).
func (e *benchEnv) isolationCost() {
	if err := sandbox.CheckIsolation(); err != nil {
		fmt.Printf("NOTE: this host cannot isolate sandboxes (%v): the isolation row is skipped\n", err)
		return
	}
	drivers := map[string]*sandbox.Local{}
	for _, iso := range []string{sandbox.IsolationBwrap, sandbox.IsolationNone} {
		l, err := sandbox.NewLocalWith(filepath.Join(e.dir, "isolation-"+iso), sandbox.Options{Isolation: iso})
		if err != nil {
			e.b.Fatal(err)
		}
		defer l.Close()
		drivers[iso] = l
	}
	var parts []string
	worst := 0.0
	for _, c := range []struct{ online, nextSoon bool }{{true, false}, {false, false}, {true, true}, {false, true}} {
		net := map[bool]string{true: "online", false: "offline"}[c.online]
		if c.nextSoon {
			net += ", a job's next steps"
		}
		exec := map[string]func() float64{}
		for iso, l := range drivers {
			sb, err := l.Acquire(context.Background(), sandbox.Spec{Mode: "provision", Name: fmt.Sprintf("bench-%v-%v", c.online, c.nextSoon), InternetEnabled: c.online})
			if err != nil {
				e.b.Fatal(err)
			}
			defer func() { _ = l.Delete(context.Background(), sb.Name) }()
			exec[iso] = func() float64 { return e.execTrue(l, sb.Name, c.nextSoon) }
		}
		bw, none := ab(benchSamples, exec[sandbox.IsolationBwrap], exec[sandbox.IsolationNone])
		diff := make([]float64, len(bw))
		for i := range bw {
			diff[i] = bw[i] - none[i]
		}
		d := summarize(diff)
		worst = max(worst, d.med)
		parts = append(parts, fmt.Sprintf("%s %s ms (bwrap %s, none %s)", net, d, summarize(bw), summarize(none)))
	}
	e.rows = append(e.rows, benchRow{measure: "sandbox isolation cost per command (bwrap − none), `true` through the local driver",
		now: strings.Join(parts, "; "), goal: "≤ 10 ms", ratio: worst / 10})
}

// execTrue runs `true` benchIsolationExecs times in a sandbox and returns
// the mean milliseconds per command; nextSoon tells the driver each is
// followed by another (ExecRequest.NextSoon).
func (e *benchEnv) execTrue(l *sandbox.Local, name string, nextSoon bool) float64 {
	t0 := time.Now()
	for i := 0; i < benchIsolationExecs; i++ {
		res, err := l.Exec(context.Background(), sandbox.ExecRequest{Sandbox: name, Argv: []string{"true"}, NextSoon: nextSoon})
		if err != nil || res.ExitCode != 0 {
			e.b.Fatalf("true in %s: exit %d, %v", name, res.ExitCode, err)
		}
	}
	return ms(time.Since(t0)) / benchIsolationExecs
}
