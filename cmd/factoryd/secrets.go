package main

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/linefactory/linefactory/activities/sandbox"
)

// secretEnv are the variables that carry secrets: read once by loadConfig,
// then removed from the environment so that nothing factoryd starts, and
// nothing reading /proc/<pid>/environ later, sees them.
var secretEnv = []string{"FACTORY_BOOTSTRAP_TOKEN", "FACTORY_DATABASE_URL", "FACTORY_INTEGRATION_SECRETS"}

// scrubSecrets removes the secret variables from factoryd's environment and
// makes every file factoryd creates private (umask 077).
func scrubSecrets() {
	for _, name := range secretEnv {
		_ = os.Unsetenv(name)
	}
	syscall.Umask(0o077)
}

// privateDataDir makes the data directory, readable by factoryd's user only.
func privateDataDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return os.Chmod(dir, 0o700)
}

// privateStore makes the SQLite store files readable by factoryd's user
// only (a store made by an older version may be 0644).
func privateStore(cfg config) {
	path := cfg.DatabaseURL
	for _, p := range []string{"sqlite://", "sqlite3://", "file:"} {
		path = strings.TrimPrefix(path, p)
	}
	if path == "" {
		path = filepath.Join(cfg.DataDir, "factory.db")
	}
	if strings.Contains(path, "://") {
		return // PostgreSQL
	}
	path, _, _ = strings.Cut(path, "?")
	for _, suffix := range []string{"", "-wal", "-shm", "-journal"} {
		_ = os.Chmod(path+suffix, 0o600)
	}
}

// newSandboxDriver makes the local sandbox driver with the configured
// isolation: serve refuses to start when the host cannot isolate, unless
// the operator chose FACTORY_SANDBOX_ISOLATION=none.
func newSandboxDriver(cfg config, logger *slog.Logger) (*sandbox.Local, error) {
	dir := filepath.Join(cfg.DataDir, "sandboxes")
	if cfg.SandboxIsolation == sandbox.IsolationNone {
		logger.Warn("sandbox isolation is off (FACTORY_SANDBOX_ISOLATION=none): steps run on the host as factoryd's user and can reach its data, store, Temporal and network; every sandbox records it")
	}
	drv, err := sandbox.NewLocalWith(dir, sandbox.Options{Isolation: cfg.SandboxIsolation})
	if err != nil {
		return nil, fmt.Errorf("%w (set FACTORY_SANDBOX_ISOLATION=none to run steps without isolation, at your own risk)", err)
	}
	return drv, nil
}
