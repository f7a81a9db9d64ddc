package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/linefactory/linefactory/cmd/internal/embedded"
	"github.com/linefactory/linefactory/internal/testwait"
)

func TestConfigScale(t *testing.T) {
	dir := t.TempDir()
	c, err := loadConfig("serve", []string{"--data-dir", dir})
	if err != nil {
		t.Fatal(err)
	}
	if c.Scale.TemporalWait != time.Minute || c.Scale.WorkerMaxSteps != 64 || c.Scale.WorkerPollers != 8 || c.Scale.OpsExplicit {
		t.Errorf("defaults: %+v", c.Scale)
	}
	if want := "file://" + filepath.Join(dir, "sandboxes", "snapshots"); !strings.HasPrefix(c.Scale.SnapshotURL, want+"?") {
		t.Errorf("default snapshot URL %q, want %s?…", c.Scale.SnapshotURL, want)
	}
	t.Setenv("FACTORY_TEMPORAL_WAIT", "5s")
	t.Setenv("FACTORY_WORKER_MAX_STEPS", "3")
	t.Setenv("FACTORY_WORKER_POLLERS", "4")
	t.Setenv("FACTORY_OPS_ADDR", "127.0.0.1:0")
	t.Setenv("FACTORY_SNAPSHOT_URL", "s3://bucket?region=eu-west-1")
	c, err = loadConfig("serve", nil)
	if err != nil || c.Scale.TemporalWait != 5*time.Second || c.Scale.WorkerMaxSteps != 3 || c.Scale.WorkerPollers != 4 || !c.Scale.OpsExplicit ||
		c.Scale.SnapshotURL != "s3://bucket?region=eu-west-1" {
		t.Fatalf("from the environment: %+v %v", c.Scale, err)
	}
	for _, bad := range [][]string{{"--temporal-wait", "soon"}, {"--temporal-wait", "-1s"}, {"--worker-max-steps", "0"},
		{"--worker-max-steps", "x"}, {"--worker-pollers", "1"}, {"--worker-pollers", "many"}, {"--snapshot-url", "/just/a/path"}} {
		if _, err := loadConfig("serve", bad); err == nil || !strings.Contains(err.Error(), bad[0]) {
			t.Errorf("%v: %v, want an error naming the flag", bad, err)
		}
	}
}

func TestWorkerIdentityIsStable(t *testing.T) {
	dir := t.TempDir()
	a, err := workerIdentity(dir)
	if err != nil || !strings.HasPrefix(a, "w-") {
		t.Fatalf("first id %q %v", a, err)
	}
	b, err := workerIdentity(dir)
	if err != nil || b != a {
		t.Fatalf("second id %q %v, want %q", b, err, a)
	}
	if c, _ := workerIdentity(t.TempDir()); c == a {
		t.Fatalf("two data dirs share the id %q", a)
	}
}

// TestServeWaitsForTemporal: a worker started before its Temporal server
// retries, logging each attempt, and becomes ready once the server is up.
func TestServeWaitsForTemporal(t *testing.T) {
	port := freePort(t)
	dataDir := filepath.Join(t.TempDir(), "worker")
	ops := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	serverDir := t.TempDir()
	// The key file appears with the server: until then the worker retries.
	env := append(os.Environ(), "FACTORYD_E2E_CHILD=1", "FACTORY_ROLES=worker", "FACTORY_DATA_DIR="+dataDir,
		fmt.Sprintf("TEMPORAL_ADDRESS=127.0.0.1:%d", port), "FACTORY_TEMPORAL_WAIT=90s",
		"FACTORY_TEMPORAL_API_KEY_FILE="+filepath.Join(serverDir, embedded.APIKeyFile),
		"FACTORY_OPS_ADDR="+ops, "FACTORY_HTTP_ADDR="+ops)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := make(chan error, 1)
	go func() {
		// The server comes up only once the worker has started trying.
		testwait.Until(time.Minute, func() bool {
			_, err := os.Stat(dataDir)
			return err == nil
		})
		srv, err := embedded.Start(ctx, embedded.Config{DataDir: serverDir, FrontendPort: port, UIAddr: "off"})
		if err == nil {
			t.Cleanup(func() { _ = srv.Stop() })
		}
		started <- err
	}()
	d := startDaemon(t, "", env)
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	d.kill(syscall.SIGTERM)
	if log := d.log.String(); !strings.Contains(log, "Temporal not reachable yet") {
		t.Fatalf("no retry was logged:\n%s", log)
	}
}
