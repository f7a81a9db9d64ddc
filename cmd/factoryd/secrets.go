package main

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/linefactory/linefactory/activities/sandbox"
)

// secretEnv are the variables that carry secrets: read once by loadConfig,
// then removed from the environment so that nothing factoryd starts, and
// nothing reading /proc/<pid>/environ later, sees them.
var secretEnv = []string{"FACTORY_BOOTSTRAP_TOKEN", "FACTORY_DATABASE_URL", "FACTORY_INTEGRATION_SECRETS", "FACTORY_TOKEN_KEY", "TEMPORAL_API_KEY"}

// scrubSecrets removes the secret variables from factoryd's environment,
// also from the block the kernel shows as /proc/<pid>/environ (zeroed in
// place: the runtime's strings for the other variables still point into
// it), and makes every file factoryd creates private (umask 077). The
// config's secrets, which may share that memory, are copied first.
func scrubSecrets(cfg *config) {
	cfg.BootstrapToken = strings.Clone(cfg.BootstrapToken)
	cfg.DatabaseURL = strings.Clone(cfg.DatabaseURL)
	cfg.TokenKey = strings.Clone(cfg.TokenKey)
	cfg.TemporalAuth.APIKey = strings.Clone(cfg.TemporalAuth.APIKey)
	secrets := make(map[string]string, len(cfg.IntegrationSecrets))
	for k, v := range cfg.IntegrationSecrets {
		secrets[strings.Clone(k)] = strings.Clone(v)
	}
	cfg.IntegrationSecrets = secrets
	for _, name := range secretEnv {
		_ = os.Unsetenv(name)
	}
	zeroEnvironBlock()
	syscall.Umask(0o077)
}

// zeroEnvironBlock overwrites the secret entries of the process's original
// environment block (env_start in /proc/self/stat) with NULs.
func zeroEnvironBlock() {
	block, err := os.ReadFile("/proc/self/environ")
	if err != nil {
		return
	}
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return
	}
	i := strings.LastIndexByte(string(stat), ')')
	fields := strings.Fields(string(stat[i+1:]))
	if len(fields) < 49 {
		return
	}
	start, err := strconv.ParseUint(fields[47], 10, 64) // field 50: env_start
	if err != nil {
		return
	}
	mem, err := os.OpenFile("/proc/self/mem", os.O_WRONLY, 0)
	if err != nil {
		return
	}
	defer mem.Close()
	off := 0
	for _, kv := range strings.Split(string(block), "\x00") {
		name, _, _ := strings.Cut(kv, "=")
		for _, secret := range secretEnv {
			if name == secret {
				_, _ = mem.WriteAt(make([]byte, len(kv)), int64(start)+int64(off))
			}
		}
		off += len(kv) + 1
	}
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
