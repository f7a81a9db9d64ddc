package main

// End to end on PostgreSQL: the store goes away while a step writes its
// output (issue 16: "a store outage during logging loses no line, or
// reports the loss").

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// outageLines is how many numbered lines the step prints, one every 20 ms
// (ten seconds and more).
const outageLines = 500

// TestEndToEndLogStoreOutage: while a step prints numbered lines for ten
// seconds, the test blocks factoryd's appends for two seconds (a lock on
// the step log table), then keeps terminating factoryd's PostgreSQL
// connections (pg_terminate_backend, every 200 ms for four seconds). The
// run reaches a final state, and every line is in the step's log, in
// order; or the loss is reported: in the log by a marker line, in /metrics
// and in factoryd's own log.
func TestEndToEndLogStoreOutage(t *testing.T) {
	admin := os.Getenv("FACTORY_TEST_POSTGRES_DSN")
	if admin == "" {
		t.Skip("SKIPPING: FACTORY_TEST_POSTGRES_DSN is unset: the store outage test needs PostgreSQL")
	}
	app := fmt.Sprintf("factoryd_outage_%d_%d", os.Getpid(), time.Now().UnixNano())
	dsn := withQuery(t, scaleStore(t), "application_name", app)
	env := append(robustEnv(t, t.TempDir()), "FACTORY_SANDBOX_ISOLATION=none", "FACTORY_DATABASE_URL="+dsn)
	d := startDaemon(t, t.TempDir(), env)
	d.deploy("chatty", fmt.Sprintf("[job]\nname = \"chatty\"\n[[run.tasks]]\nname = \"t\"\n[[run.tasks.steps]]\nname = \"s\"\n"+
		"exec = [\"sh\", \"-c\", \"i=1; while [ $i -le %d ]; do echo line-$i; i=$((i+1)); sleep 0.02; done\"]\n", outageLines))

	gdb, err := gorm.Open(postgres.Open(admin), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
	if err != nil {
		t.Fatalf("connect to PostgreSQL: %v", err)
	}
	db, err := gdb.DB()
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	id := d.start("chatty", nil)
	waitFor(t, "the step's first output", time.Minute, func() map[string]any {
		return map[string]any{"log": d.stepLog(id)}
	}, func(m map[string]any) bool { return strings.Contains(m["log"].(string), "line-") })
	blockFor(t, db, searchPath(t, dsn), 2*time.Second)
	if _, m := d.call("GET", "/job-runs/"+id, "", nil); m["status"] != "running" {
		t.Fatalf("run %s is %v before the connections are terminated: the step must still be printing", id, m["status"])
	}
	killed := terminateFor(t, db, app, 4*time.Second)
	final := d.wait(id, 3*time.Minute)
	t.Logf("run %s: %v after %d connections terminated", id, final["status"], killed)
	if killed == 0 {
		t.Fatal("no factoryd connection was terminated: the outage did not happen")
	}
	if final["status"] != "succeeded" {
		t.Fatalf("run %s: %v %v %v", id, final["status"], final["error_code"], final["error_message"])
	}
	missing, dup, disordered := checkLines(d.stepLog(id))
	code, metrics := d.getRaw("/metrics")
	if code != 200 {
		t.Fatalf("GET /metrics: %d", code)
	}
	retries, lost := metricValue(string(metrics), "linefactory_step_log_append_retries_total"),
		metricValue(string(metrics), "linefactory_step_log_lost_bytes_total")
	t.Logf("%d lines missing, %d repeated, %d out of order; /metrics: %v append retries, %v bytes lost", missing, dup, disordered, retries, lost)
	if retries == 0 {
		t.Fatal("no append was retried: the outage did not reach the step's logging")
	}
	if disordered > 0 {
		t.Fatalf("%d lines out of order:\n%s", disordered, d.stepLog(id))
	}
	if missing == 0 {
		return
	}
	log := d.stepLog(id)
	d.kill(syscall.SIGTERM)
	if lost <= 0 || !strings.Contains(log, "lost: the store did not take them") ||
		!strings.Contains(d.log.String(), "step output lost") {
		t.Fatalf("%d lines lost and not reported (lost bytes %v)\nstep log:\n%s", missing, lost, log)
	}
}

// blockFor holds an exclusive lock on the step log table of schema for d:
// appends wait for it.
func blockFor(t *testing.T, db *sql.DB, schema string, d time.Duration) {
	t.Helper()
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(fmt.Sprintf(`LOCK TABLE %q.step_logs IN ACCESS EXCLUSIVE MODE`, schema)); err != nil {
		_ = tx.Rollback()
		t.Fatalf("lock: %v", err)
	}
	<-time.After(d) // the outage's length, not a wait for a condition
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// searchPath is the search_path (the schema) of a DSN.
func searchPath(t *testing.T, dsn string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return u.Query().Get("search_path")
}

// terminateFor terminates the PostgreSQL connections of application app
// every 200 ms for d, and returns how many it terminated.
func terminateFor(t *testing.T, db *sql.DB, app string, d time.Duration) int64 {
	t.Helper()
	var killed atomic.Int64
	tick := time.NewTicker(200 * time.Millisecond) // the outage's rhythm
	defer tick.Stop()
	for end := time.Now().Add(d); time.Now().Before(end); <-tick.C {
		rows, err := db.QueryContext(context.Background(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE application_name = $1 AND pid <> pg_backend_pid()`, app)
		if err != nil {
			t.Fatalf("terminate: %v", err)
		}
		for rows.Next() {
			killed.Add(1)
		}
		rows.Close()
	}
	return killed.Load()
}

var lineRE = regexp.MustCompile(`(?m)^line-(\d+)$`)

// checkLines counts the numbered lines missing from a step's log, those
// repeated (an append retried after the store took it) and those that
// first appear after a later one.
func checkLines(log string) (missing, repeated, disordered int) {
	seen := map[int]int{}
	highest := 0
	for _, m := range lineRE.FindAllStringSubmatch(log, -1) {
		n, _ := strconv.Atoi(m[1])
		if seen[n] == 0 && n < highest {
			disordered++
		}
		highest = max(highest, n)
		seen[n]++
	}
	for i := 1; i <= outageLines; i++ {
		switch {
		case seen[i] == 0:
			missing++
		case seen[i] > 1:
			repeated += seen[i] - 1
		}
	}
	return missing, repeated, disordered
}

// metricValue is the value of a counter in a Prometheus text exposition
// (0 when absent).
func metricValue(text, name string) float64 {
	for _, l := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return 0
}

// withQuery sets a query parameter of a URL.
func withQuery(t *testing.T, raw, key, value string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set(key, value)
	u.RawQuery = q.Encode()
	return u.String()
}
