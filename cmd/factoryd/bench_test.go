package main

// `make bench`: what users feel, all in one process and one run. One
// embedded Temporal server; factoryd (API + worker, Web UI off) is served
// in-process on SQLite, then on PostgreSQL (FACTORY_TEST_POSTGRES_DSN); a
// bare Temporal worker doing the same work runs in the same process, on the
// same server, and the two are measured interleaved (A B A B …). Every row
// of issue 14's table is printed with its goal and the ratio to it, then a
// Markdown table for the README.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/linefactory/linefactory/cmd/internal/embedded"
	"github.com/linefactory/linefactory/internal/cpuclock"
	"github.com/linefactory/linefactory/manifests/manifesttest"
	"github.com/linefactory/linefactory/manifests/run"
)

const (
	benchSamples = 5 // per side of an A/B comparison (the listing, isolation)
	// The rows whose samples are short take more of them: a median of few
	// moved by 0.2× between runs on the shared development VM.
	benchStepSamples = 15 // step overhead and a line's wall time (each under a second)
	benchLineSamples = 9  // 20 concurrent lines (a few seconds each)
	benchSteps       = 20 // `true` steps of the step-overhead job
	benchLines       = 20 // concurrent line runs
	benchConns       = 64 // concurrent API clients
	benchListRows    = 50000
	benchLoadFor     = 3 * time.Second
	benchListFor     = time.Second // per sample of the 1-client listing
	benchBareQueue   = "bench-bare"
)

// benchTrue is the bare-Temporal baseline's step: run `true`.
func benchTrue(ctx context.Context) error { return exec.CommandContext(ctx, "true").Run() }

// bareSteps is the baseline of a job of benchSteps steps: that many
// activities in sequence.
func bareSteps(ctx workflow.Context) error {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
	for i := 0; i < benchSteps; i++ {
		if err := workflow.ExecuteActivity(ctx, "BenchTrue").Get(ctx, nil); err != nil {
			return err
		}
	}
	return nil
}

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

// benchRow is one printed measure.
type benchRow struct {
	measure, now, goal string
	// ratio is now/goal for "at most" goals and goal/now for "at least"
	// ones: ≤ 1 meets the goal. A row without a goal (goal "") is shown
	// for comparison.
	ratio float64
}

type benchEnv struct {
	b     *testing.B
	tc    client.Client
	http  *http.Client
	base  string
	token string
	// temporalKey is the embedded server's API key.
	temporalKey string
	rows        []benchRow
	forkMs      float64
	// uncached makes serve keep no finished runs' documents
	// (FACTORY_FINISHED_RUN_CACHE_TTL=0).
	uncached bool
	jobRun   string // the finished job run readsByID reads
	// dir is where the bench keeps its data (benchDataDir) and dirMs what
	// making and removing a directory costs there.
	dir   string
	dirMs float64
}

// stats is a sample's median and range.
type stats struct{ med, lo, hi float64 }

func summarize(xs []float64) stats {
	s := slices.Clone(xs)
	slices.Sort(s)
	return stats{med: s[len(s)/2], lo: s[0], hi: s[len(s)-1]}
}

func (s stats) String() string { return fmt.Sprintf("%.1f (%.1f–%.1f)", s.med, s.lo, s.hi) }

func BenchmarkIssue14(b *testing.B) {
	if b.N > 1 {
		b.Skip("run with -benchtime 1x: one pass measures everything")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := benchDataDir(b)
	port := freePort(b)
	srv, err := embedded.Start(ctx, embedded.Config{DataDir: filepath.Join(dir, "temporal"), FrontendPort: port, UIAddr: "off", LogLevel: "fatal"})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = srv.Stop() }()
	tc := dialBench(b, srv.FrontendAddr(), srv.APIKey())
	defer tc.Close()
	stopBare := startBare(b, tc)
	defer stopBare()
	e := &benchEnv{b: b, tc: tc, token: "bench-token", temporalKey: srv.APIKey(),
		http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: benchConns * 2, MaxConnsPerHost: benchConns * 2}}}
	e.forkMs = e.measureForkExec()
	e.dir, e.dirMs = dir, benchDirCost(b, dir)

	// SQLite: each factoryd its own data dir and store ("" below).
	sqliteDir := filepath.Join(dir, "sqlite")
	if benchRows("steps") {
		e.isolatedSteps("SQLite", 1.1, sqliteDir, "", srv.FrontendAddr())
	}
	if benchRows("lines") {
		// As the step rows: in one process without isolation (the
		// orchestration alone) and with bwrap (the default: each stage's
		// sandbox gets its network namespace and slirp4netns, and its
		// command a bwrap), and against the external server without.
		for _, c := range []struct{ temporalAddr, iso string }{{"", "none"}, {"", "bwrap"}, {srv.FrontendAddr(), "none"}} {
			t := topologyOf(c.temporalAddr)
			stop := e.serve(sqliteDir+"-lines-"+t.dir()+"-"+c.iso, "", c.temporalAddr, c.iso)
			e.setup()
			where := fmt.Sprintf("%s, isolation %s", t, c.iso)
			e.lineWall(where)
			e.lineThroughput(where)
			stop()
		}
	}

	pg := os.Getenv("FACTORY_TEST_POSTGRES_DSN")
	if pg == "" {
		fmt.Println("NOTE: FACTORY_TEST_POSTGRES_DSN is unset: the PostgreSQL rows are skipped")
	} else if benchRows("steps") || benchRows("reads") {
		dsn := benchSchema(b, pg)
		pgDir := filepath.Join(dir, "pg")
		if benchRows("steps") {
			e.isolatedSteps("PostgreSQL", 1.3, pgDir, dsn, srv.FrontendAddr())
		}
		if benchRows("reads") {
			stop := e.serve(pgDir+"-reads", dsn, "", "")
			e.setup()
			e.reads(dsn)
			stop()
			// The same reads by id with every read going to the
			// database, as a running run's always do.
			e.uncached = true
			stop = e.serve(pgDir+"-reads-uncached", dsn, "", "")
			e.uncached = false
			e.setup()
			e.readsByID(e.readRecords(1), "every read from the database (no finished-run cache)", false)
			stop()
		}
	}
	e.isolationCost()
	e.print()
}

// benchRows tells whether the rows of group (steps, lines or reads) are
// measured: FACTORY_BENCH_ROWS lists the groups to run (comma-separated),
// unset or empty runs them all.
func benchRows(group string) bool {
	v := strings.TrimSpace(os.Getenv("FACTORY_BENCH_ROWS"))
	return v == "" || slices.Contains(strings.Split(v, ","), group)
}

// topology is how factoryd meets Temporal in a row: in one process with
// its own embedded server (make run, the default: a process that is the
// only worker hands a step to itself, eagerly, as bare Temporal does), or
// apart, against an external Temporal server (how API and workers scale out:
// every step goes to the queue of the worker that holds its sandbox, which
// Temporal cannot dispatch eagerly).
type topology string

const (
	oneProcess topology = "one process"
	apart      topology = "external Temporal"
)

func topologyOf(temporalAddr string) topology {
	if temporalAddr == "" {
		return oneProcess
	}
	return apart
}

func (t topology) dir() string {
	return map[topology]string{oneProcess: "embedded", apart: "external"}[t]
}

// isolatedSteps measures the step overhead on one database: in one process
// with FACTORY_SANDBOX_ISOLATION=none (the orchestration alone) and with
// bwrap (the default: orchestration and isolation), and against the
// external Temporal server (steps routed to the worker's own queue) without
// isolation; each against bare Temporal on the same server.
func (e *benchEnv) isolatedSteps(db string, goalRatio float64, dataDir, dsn, externalAddr string) {
	for _, c := range []struct{ temporalAddr, iso string }{{"", "none"}, {"", "bwrap"}, {externalAddr, "none"}} {
		t := topologyOf(c.temporalAddr)
		stop := e.serve(dataDir+"-"+t.dir()+"-"+c.iso, dsn, c.temporalAddr, c.iso)
		e.setup()
		e.stepOverhead(fmt.Sprintf("%s, %s, isolation %s", db, t, c.iso), goalRatio)
		stop()
	}
}

// serve runs factoryd in this process and returns its stop. With
// temporalAddr "" it starts its own embedded Temporal server, as `make run`
// does, and until stop the bench's client and bare worker use that server;
// else factoryd uses the server at temporalAddr (the bench's own). isolation
// sets FACTORY_SANDBOX_ISOLATION ("" keeps the environment's or the default);
// dsn "" is a SQLite store in dataDir.
func (e *benchEnv) serve(dataDir, dsn, temporalAddr, isolation string) func() {
	b := e.b
	if dsn == "" {
		dsn = filepath.Join(dataDir, "factory.db")
	}
	args := []string{"--addr", "127.0.0.1:0", "--data-dir", dataDir, "--database-url", dsn,
		"--temporal-ui-addr", "off", "--log-level", "error"}
	port := 0
	if temporalAddr != "" {
		args = append(args, "--temporal-address", temporalAddr)
	} else {
		port = freePort(b)
		args = append(args, "--temporal-port", fmt.Sprint(port))
	}
	if isolation != "" {
		args = append(args, "--sandbox-isolation", isolation)
	}
	cfg, err := loadConfig("serve", args)
	if err != nil {
		b.Fatal(err)
	}
	cfg.BootstrapToken = e.token
	if e.uncached {
		cfg.Pool.FinishedRunCacheTTL = 0
	}
	if temporalAddr != "" {
		cfg.TemporalAuth.APIKey = e.temporalKey
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- serve(ctx, cfg, slog.New(slog.NewJSONHandler(io.Discard, nil)), ready, nil) }()
	select {
	case addr := <-ready:
		e.base = "http://" + addr
	case err := <-done:
		b.Fatalf("factoryd: %v", err)
	case <-time.After(2 * time.Minute):
		b.Fatal("factoryd did not start")
	}
	restore := func() {}
	if temporalAddr == "" {
		// The bench's client and bare worker move to factoryd's server.
		key, err := os.ReadFile(filepath.Join(dataDir, "temporal", "api.key"))
		if err != nil {
			b.Fatal(err)
		}
		tc := dialBench(b, fmt.Sprintf("127.0.0.1:%d", port), strings.TrimSpace(string(key)))
		stopBare := startBare(b, tc)
		prev := e.tc
		e.tc = tc
		restore = func() {
			e.tc = prev
			stopBare()
			tc.Close()
		}
	}
	return func() {
		restore()
		cancel()
		if err := <-done; err != nil {
			b.Errorf("factoryd: %v", err)
		}
	}
}

// dialBench connects the bench's Temporal client.
func dialBench(b *testing.B, addr, apiKey string) client.Client {
	tc, err := client.Dial(client.Options{HostPort: addr, Namespace: "default", Credentials: client.NewAPIKeyStaticCredentials(apiKey),
		Logger: tlog.NewStructuredLogger(slog.New(slog.NewJSONHandler(io.Discard, nil))), ConnectionOptions: client.ConnectionOptions{GrpcCompression: &client.GrpcCompressionNone{}, TLSDisabled: true}})
	if err != nil {
		b.Fatal(err)
	}
	return tc
}

// startBare starts the bare Temporal worker (not logging) on tc and returns
// its stop.
func startBare(b *testing.B, tc client.Client) func() {
	w := worker.New(tc, benchBareQueue, worker.Options{})
	w.RegisterWorkflowWithOptions(bareSteps, workflow.RegisterOptions{Name: "BenchBareSteps"})
	w.RegisterWorkflowWithOptions(bareThree, workflow.RegisterOptions{Name: "BenchBareThree"})
	w.RegisterWorkflowWithOptions(bareStage, workflow.RegisterOptions{Name: "BenchBareStage"})
	w.RegisterActivityWithOptions(benchTrue, activity.RegisterOptions{Name: "BenchTrue"})
	if err := w.Start(); err != nil {
		b.Fatal(err)
	}
	return w.Stop
}

func (e *benchEnv) call(method, path, ctype string, body []byte) (int, []byte) {
	req, _ := http.NewRequest(method, e.base+path, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+e.token)
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := e.http.Do(req)
	if err != nil {
		return 0, []byte(err.Error()) // the callers check the status
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

func (e *benchEnv) post(path, ctype string, body []byte, want ...int) map[string]any {
	code, out := e.call("POST", path, ctype, body)
	if !slices.Contains(want, code) {
		e.b.Fatalf("POST %s: %d %s", path, code, out)
	}
	var m map[string]any
	_ = json.Unmarshal(out, &m)
	return m
}

const benchLine = "[line]\nname = \"three\"\n[trigger]\ntype = \"manual\"\n" +
	"[[stages]]\nid = \"a\"\njob = \"one\"\n[[stages]]\nid = \"b\"\njob = \"one\"\n[[stages]]\nid = \"c\"\njob = \"one\"\n" +
	"[[transitions]]\ntype = \"conditional\"\nid = \"ab\"\nfrom = \"a\"\nto = \"b\"\nwhen = { op = \"always\" }\n" +
	"[[transitions]]\ntype = \"conditional\"\nid = \"bc\"\nfrom = \"b\"\nto = \"c\"\nwhen = { op = \"always\" }\n"

func (e *benchEnv) setup() {
	var job strings.Builder
	job.WriteString("[job]\nname = \"steps\"\n[[run.tasks]]\nname = \"t\"\n")
	for i := 0; i < benchSteps; i++ {
		job.WriteString("[[run.tasks.steps]]\nexec = [\"true\"]\n")
	}
	e.post("/jobs/steps/versions", "application/toml", []byte(job.String()), 200, 201)
	e.post("/jobs/one/versions", "application/toml", []byte(manifesttest.OneStepJob("one", "", `["true"]`)), 200, 201)
	e.post("/factory/lines/three/deploy", "application/toml", []byte(benchLine), 200, 201)
}

// measureForkExec is the median cost of running `true` here.
func (e *benchEnv) measureForkExec() float64 {
	var xs []float64
	for i := 0; i < 50; i++ {
		t0 := time.Now()
		if err := exec.Command("true").Run(); err != nil {
			e.b.Fatal(err)
		}
		xs = append(xs, ms(time.Since(t0)))
	}
	return summarize(xs).med
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func (e *benchEnv) waitWorkflow(id string) {
	if err := e.workflowDone(id); err != nil {
		e.b.Fatal(err)
	}
}

// workflowDone waits for a workflow (following its continue-as-new runs).
func (e *benchEnv) workflowDone(id string) error {
	if err := e.tc.GetWorkflow(context.Background(), id, "").Get(context.Background(), nil); err != nil {
		return fmt.Errorf("workflow %s: %w", id, err)
	}
	return nil
}

func (e *benchEnv) bare(name string) {
	r, err := e.tc.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{TaskQueue: benchBareQueue}, name)
	if err != nil {
		e.b.Fatal(err)
	}
	if err := r.Get(context.Background(), nil); err != nil {
		e.b.Fatal(err)
	}
}

// ab measures a and b alternately, samples times each, after one warm-up
// of each.
func ab(samples int, a, b func() float64) (as, bs []float64) {
	a()
	b()
	for i := 0; i < samples; i++ {
		as = append(as, a())
		bs = append(bs, b())
	}
	return as, bs
}

func ratios(as, bs []float64) []float64 {
	out := make([]float64, len(as))
	for i := range as {
		out[i] = as[i] / bs[i]
	}
	return out
}

// stepOverhead: HTTP start → terminal of a job of benchSteps `true` steps,
// minus their fork/exec, per step; bare: a workflow of as many activities.
func (e *benchEnv) stepOverhead(db string, goalRatio float64) {
	lf := func() float64 {
		t0 := time.Now()
		m := e.post("/jobs/steps/runs", "application/json", nil, 201)
		e.waitWorkflow(run.JobRunWorkflowID(m["id"].(string)))
		return (ms(time.Since(t0)) - benchSteps*e.forkMs) / benchSteps
	}
	bare := func() float64 {
		t0 := time.Now()
		e.bare("BenchBareSteps")
		return (ms(time.Since(t0)) - benchSteps*e.forkMs) / benchSteps
	}
	as, bs := ab(benchStepSamples, lf, bare)
	r := summarize(ratios(as, bs))
	e.rows = append(e.rows, benchRow{
		measure: fmt.Sprintf("step overhead, HTTP start → terminal, %d `true` steps, minus fork/exec (%.2f ms), %s", benchSteps, e.forkMs, db),
		now:     fmt.Sprintf("%s ms (bare %s ms: %.2f× (%.2f–%.2f))", summarize(as), summarize(bs), r.med, r.lo, r.hi),
		goal:    fmt.Sprintf("≤ %.1f× bare", goalRatio), ratio: r.med / goalRatio})
}

// lineWall: one 3-stage line of one-step jobs, POST → manager done; bare:
// three child workflows of one activity.
func (e *benchEnv) lineWall(where string) {
	lf := func() float64 {
		t0 := time.Now()
		m := e.post("/factory/lines/three/runs", "application/json", nil, 201)
		e.waitWorkflow(run.LineRunWorkflowID(m["id"].(string)))
		return ms(time.Since(t0))
	}
	bare := func() float64 {
		t0 := time.Now()
		e.bare("BenchBareThree")
		return ms(time.Since(t0))
	}
	as, bs := ab(benchStepSamples, lf, bare)
	r := summarize(ratios(as, bs))
	a := summarize(as)
	e.rows = append(e.rows, benchRow{measure: fmt.Sprintf("one 3-stage line of `true` jobs, wall time, %s", where),
		now:  fmt.Sprintf("%s ms (bare %s ms: %.2f× (%.2f–%.2f))", a, summarize(bs), r.med, r.lo, r.hi),
		goal: "≤ 3× bare, ≤ 300 ms", ratio: max(r.med/3, a.med/300)})
	e.checkTurns()
}

// checkTurns: a finished 3-stage line still lists a turn per stage.
func (e *benchEnv) checkTurns() {
	m := e.post("/factory/lines/three/runs", "application/json", nil, 201)
	id := m["id"].(string)
	e.waitWorkflow(run.LineRunWorkflowID(id))
	_, out := e.call("GET", "/factory/line-runs/"+id, "", nil)
	var rec struct {
		Status       string `json:"status"`
		ManagerTurns []any  `json:"manager_turns"`
	}
	if err := json.Unmarshal(out, &rec); err != nil || rec.Status != "succeeded" || len(rec.ManagerTurns) < 3 {
		e.b.Fatalf("line run %s: %s", id, out)
	}
}

// lineThroughput: benchLines line runs at once, runs/s; bare the same.
func (e *benchEnv) lineThroughput(where string) {
	// CPU per line of each sample, this process's (factoryd and the bare
	// worker both run in it, with the embedded server) and its reaped
	// children's: steadier than the rate on a shared machine, and it says
	// what a line costs.
	var cpu []float64
	many := func(start func() (string, error)) float64 {
		c0 := cpuclock.Ms()
		defer func() { cpu = append(cpu, (cpuclock.Ms()-c0)/benchLines) }()
		t0 := time.Now()
		var wg sync.WaitGroup
		errs := make(chan error, benchLines)
		for i := 0; i < benchLines; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id, err := start()
				if err == nil {
					err = e.workflowDone(id)
				}
				if err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			e.b.Fatal(err)
		}
		return benchLines / time.Since(t0).Seconds()
	}
	lf := func() float64 {
		return many(func() (string, error) {
			code, out := e.call("POST", "/factory/lines/three/runs", "application/json", nil)
			var m struct {
				ID string `json:"id"`
			}
			if err := json.Unmarshal(out, &m); err != nil || code != 201 {
				return "", fmt.Errorf("start line run: %d %s", code, out)
			}
			return run.LineRunWorkflowID(m.ID), nil
		})
	}
	bare := func() float64 {
		return many(func() (string, error) {
			r, err := e.tc.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{TaskQueue: benchBareQueue}, "BenchBareThree")
			if err != nil {
				return "", err
			}
			return r.GetID(), nil
		})
	}
	as, bs := ab(benchLineSamples, lf, bare)
	r := summarize(ratios(as, bs))
	var lfCPU, bareCPU []float64
	for i := 2; i+1 < len(cpu); i += 2 { // after the warm-ups, alternated as ab runs them
		lfCPU, bareCPU = append(lfCPU, cpu[i]), append(bareCPU, cpu[i+1])
	}
	e.rows = append(e.rows, benchRow{measure: fmt.Sprintf("line runs/s, %d concurrent, vs bare Temporal, %s", benchLines, where),
		now: fmt.Sprintf("%.2f× (%.2f–%.2f); %s vs bare %s runs/s; CPU per line %s vs bare %s ms", r.med, r.lo, r.hi,
			summarize(as), summarize(bs), summarize(lfCPU), summarize(bareCPU)),
		goal: "≥ 0.8×", ratio: 0.8 / r.med})
}

// load GETs path from conns clients for benchLoadFor and returns req/s,
// p50 and p99 in ms. Each client first makes one untimed request, so the
// timed window starts with every client's connection open (as wrk connects
// before it counts), and then reuses its request while the path is the same:
// the load generator shares the cores with the server, so its own
// connection set-up and allocations are kept out of the latencies.
func (e *benchEnv) load(conns int, path func(i int) string) (float64, float64, float64) {
	return e.loadFor(benchLoadFor, conns, path)
}

// loadFor is load for d.
func (e *benchEnv) loadFor(d time.Duration, conns int, path func(i int) string) (float64, float64, float64) {
	var (
		mu    sync.Mutex
		lat   []float64
		n     atomic.Int64
		wg    sync.WaitGroup
		ready sync.WaitGroup
		fail  atomic.Value
	)
	start := make(chan struct{})
	var deadline time.Time
	ready.Add(conns)
	for c := 0; c < conns; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			var (
				req  *http.Request
				last string
			)
			get := func(i int) bool {
				if p := path(c*1000003 + i); req == nil || p != last {
					last = p
					req, _ = http.NewRequest("GET", e.base+p, nil)
					req.Header.Set("Authorization", "Bearer "+e.token)
				}
				if err := e.get(req); err != nil {
					fail.Store(err.Error())
					return false
				}
				return true
			}
			ok := get(-1)
			ready.Done()
			<-start
			var mine []float64
			for i := 0; ok && time.Now().Before(deadline); i++ {
				s := time.Now()
				if ok = get(i); ok {
					mine = append(mine, ms(time.Since(s)))
					n.Add(1)
				}
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}(c)
	}
	ready.Wait()
	t0 := time.Now()
	deadline = t0.Add(d)
	close(start)
	wg.Wait()
	if f := fail.Load(); f != nil {
		e.b.Fatalf("load: %v", f)
	}
	el := time.Since(t0).Seconds()
	slices.Sort(lat)
	return float64(n.Load()) / el, lat[len(lat)/2], lat[len(lat)*99/100]
}

// get sends a GET and reads its body; any status but 200 is an error. It
// goes to the transport directly, as wrk does: no redirect or cookie
// handling, so no copy of the request's headers per request (the load
// generator's allocations make collections in the process it shares with
// the server).
func (e *benchEnv) get(req *http.Request) error {
	resp, err := e.http.Transport.RoundTrip(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("GET %s: %d", req.URL.Path, resp.StatusCode)
	}
	return nil
}

// readRecords makes records to read: a finished job run (e.jobRun) and
// lines finished line runs, whose ids it returns.
func (e *benchEnv) readRecords(lines int) []string {
	m := e.post("/jobs/one/runs", "application/json", nil, 201)
	e.jobRun = m["id"].(string)
	e.waitWorkflow(run.JobRunWorkflowID(e.jobRun))
	lrs := make([]string, 0, lines)
	for i := 0; i < lines; i++ {
		m := e.post("/factory/lines/three/runs", "application/json", nil, 201)
		lrs = append(lrs, m["id"].(string))
	}
	for _, id := range lrs {
		e.waitWorkflow(run.LineRunWorkflowID(id))
	}
	return lrs
}

// readsByID measures GET /job-runs/{id} of e.jobRun and GET
// /factory/line-runs/{id} of lrs[0] at benchConns clients; how says how
// the reads are served. Rows without goal are shown for comparison.
func (e *benchEnv) readsByID(lrs []string, how string, goal bool) {
	for _, g := range []struct{ name, path string }{{"GET /job-runs/{id}", "/job-runs/" + e.jobRun}, {"GET /factory/line-runs/{id}", "/factory/line-runs/" + lrs[0]}} {
		rps, p50, p99 := e.load(benchConns, func(int) string { return g.path })
		row := benchRow{measure: fmt.Sprintf("%s, %d clients, PostgreSQL, %s", g.name, benchConns, how),
			now: fmt.Sprintf("%.0f req/s, p50 %.1f ms, p99 %.1f ms", rps, p50, p99)}
		if goal {
			row.goal, row.ratio = "≥ 5,000 req/s, p99 ≤ 10 ms", max(5000/rps, p99/10)
		}
		e.rows = append(e.rows, row)
	}
}

// reads: API read throughput and latency on PostgreSQL, and listing latency
// with benchListRows rows of other lines in the table.
func (e *benchEnv) reads(dsn string) {
	lrs := e.readRecords(60) // a full page of the line's runs
	e.readsByID(lrs, "a finished run, served from memory after its first read", true)
	// The listing's p50 at 1 client with the table holding the line's 60
	// runs (A) and with benchListRows runs of other lines added (B), A B
	// alternated benchSamples times, the rows added before each B and
	// deleted before each A (then a checkpoint each time), so that load
	// from outside the bench falls on both sides alike; then 64 clients
	// with the rows in.
	list := func(int) string { return "/factory/lines/three/runs" }
	p50 := func() float64 {
		_, p50, _ := e.loadFor(benchListFor, 1, list)
		return p50
	}
	var small, big []float64
	for i := 0; i < benchSamples; i++ {
		if i > 0 {
			e.unfillLineRuns(dsn)
		}
		small = append(small, p50())
		e.fillLineRuns(dsn, benchListRows)
		big = append(big, p50())
	}
	rps, _, p99 := e.load(benchConns, list)
	bs, ss, r := summarize(big), summarize(small), summarize(ratios(big, small))
	e.rows = append(e.rows, benchRow{measure: fmt.Sprintf("GET /factory/lines/{name}/runs (50 of %d) with %d rows in the table", len(lrs), benchListRows),
		now: fmt.Sprintf("p50 %s ms at 1 client (%s ms with %d rows: %.2f× (%.2f–%.2f)), %.0f req/s and p99 %.1f ms at %d",
			bs, ss, len(lrs), r.med, r.lo, r.hi, rps, p99, benchConns),
		goal: "p50 ≤ 2 ms, flat in table size", ratio: max(bs.med/2, r.med)})
}

// fillLineRuns adds n line runs of other lines, each a copy of an existing
// run's document, created before the line's own runs, in one statement, and
// then analyzes the table.
func (e *benchEnv) fillLineRuns(dsn string, n int) {
	db := e.benchDB(dsn)
	defer closeDB(db)
	err := db.Exec(`INSERT INTO line_runs (id, line_name, status, trigger_source, delivery_id, created_at, doc)
		SELECT 'lr_fill' || g, 'other-' || (g % 50), status, trigger_source, '', now() - g * interval '1 second', doc
		FROM generate_series(1, ?) g, (SELECT * FROM line_runs LIMIT 1) r`, n).Error
	if err != nil {
		e.b.Fatal(err)
	}
	if err := db.Exec("ANALYZE line_runs").Error; err != nil {
		e.b.Fatal(err)
	}
	e.checkpoint(db)
}

// unfillLineRuns deletes what fillLineRuns added and vacuums the table (as
// autovacuum would), which leaves it with the line's own runs.
func (e *benchEnv) unfillLineRuns(dsn string) {
	db := e.benchDB(dsn)
	defer closeDB(db)
	for _, stmt := range []string{"DELETE FROM line_runs WHERE id LIKE 'lr_fill%'", "VACUUM ANALYZE line_runs"} {
		if err := db.Exec(stmt).Error; err != nil {
			e.b.Fatal(err)
		}
	}
	e.checkpoint(db)
}

// checkpoint writes the pages a fill or its deletion dirtied now, so that
// their writing does not fall into the next sample (one side's more than
// the other's). It needs a superuser or pg_checkpoint; without, a note.
func (e *benchEnv) checkpoint(db *gorm.DB) {
	if err := db.Exec("CHECKPOINT").Error; err != nil {
		fmt.Printf("NOTE: no CHECKPOINT after changing the listing's table (%v): its writes may fall into the next sample\n", err)
	}
}

func (e *benchEnv) benchDB(dsn string) *gorm.DB {
	db, err := gorm.Open(postgres.Open(dsn), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
	if err != nil {
		e.b.Fatal(err)
	}
	return db
}

func closeDB(db *gorm.DB) {
	if sqlDB, err := db.DB(); err == nil {
		_ = sqlDB.Close()
	}
}

// benchSchema makes a fresh schema for the PostgreSQL store.
func benchSchema(b *testing.B, dsn string) string {
	schema := fmt.Sprintf("bench_%d", time.Now().UnixNano())
	db, err := gorm.Open(postgres.Open(dsn), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
	if err != nil {
		b.Fatal(err)
	}
	if err := db.Exec("CREATE SCHEMA " + schema).Error; err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = db.Exec("DROP SCHEMA " + schema + " CASCADE").Error
		if sqlDB, err := db.DB(); err == nil {
			_ = sqlDB.Close()
		}
	})
	u, err := url.Parse(dsn)
	if err != nil {
		b.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

func (e *benchEnv) print() {
	load, _ := os.ReadFile("/proc/loadavg")
	cpu := "unknown CPU"
	if info, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(info), "\n") {
			if v, ok := strings.CutPrefix(l, "model name"); ok {
				cpu = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	fmt.Printf("\nmake bench, %s, %d × %s, load average %s (at the end)\n", time.Now().UTC().Format("2006-01-02 15:04 MST"),
		goruntime.NumCPU(), cpu, strings.Join(strings.Fields(string(load))[:3], " "))
	fmt.Printf("data in %s (making and removing a directory there: %.3f ms)\n", e.dir, e.dirMs)
	fmt.Println("| measure | now | goal | ratio to goal (≤ 1 meets it) |")
	fmt.Println("|---|---|---|---|")
	for _, r := range e.rows {
		if r.goal == "" {
			fmt.Printf("| %s | %s | — | — |\n", r.measure, r.now)
			continue
		}
		fmt.Printf("| %s | %s | %s | %.2f |\n", r.measure, r.now, r.goal, r.ratio)
	}
	fmt.Println()
}
