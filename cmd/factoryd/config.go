package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/linefactory/linefactory/activities"
	"github.com/linefactory/linefactory/manifests/agentconf"
	"github.com/linefactory/linefactory/manifests/inference"
	"github.com/linefactory/linefactory/store"
)

// config is factoryd's configuration, read once from flags and environment
// variables (flags win). Every variable:
//
//	FACTORY_HTTP_ADDR        --addr          API listen address (127.0.0.1:8080)
//	FACTORY_DATA_DIR         --data-dir      data directory: SQLite store, embedded Temporal, sandboxes (./.factory)
//	FACTORY_DATABASE_URL     --database-url  store DSN: postgres://… or a SQLite path (<data-dir>/factory.db)
//	FACTORY_BOOTSTRAP_TOKEN                  a token seeded at start with scope admin (name "bootstrap")
//	FACTORY_ROLES            --roles         api,worker (both); "api" or "worker" alone to scale them apart
//	FACTORY_MAX_BODY_BYTES   --max-body-bytes  request body limit (4194304)
//	FACTORY_MAX_CONCURRENT_READS --max-concurrent-reads  authenticated GETs served at once, the rest queued (4 per CPU; 0 = unbounded)
//	FACTORY_LOG_LEVEL        --log-level     debug, info, warn, error (info)
//	TEMPORAL_ADDRESS         --temporal-address  an existing Temporal frontend; unset = embedded server
//	TEMPORAL_NAMESPACE       --temporal-namespace  Temporal namespace (default)
//	FACTORY_TEMPORAL_UI_ADDR --temporal-ui-addr  embedded Web UI address (127.0.0.1:8233; "off" disables)
//	FACTORY_TEMPORAL_LOG_LEVEL --temporal-log-level  embedded Temporal server log level (error)
//	FACTORY_TEMPORAL_PORT    --temporal-port embedded frontend gRPC port (7233)
//	TEMPORAL_API_KEY                         API key sent to TEMPORAL_ADDRESS (a secret)
//	FACTORY_TEMPORAL_API_KEY_FILE --temporal-api-key-file  file holding that key, re-read when it changes
//	TEMPORAL_TLS             --temporal-tls  TLS to TEMPORAL_ADDRESS: auto, true, false (auto)
//	TEMPORAL_TLS_SERVER_CA_CERT_PATH, _CLIENT_CERT_PATH, _CLIENT_KEY_PATH, _SERVER_NAME
//	                         --temporal-tls-ca, -cert, -key, -server-name  its CA, mTLS client certificate and key, expected name
//	FACTORY_INTEGRATION_SECRETS              signing secrets per provider: code_host=s1,chat_tool=s2
//	FACTORY_CENTS_PER_VCPU_HOUR --cents-per-vcpu-hour  compute rate per sandbox vCPU hour (4)
//	FACTORY_CENTS_PER_GB_HOUR   --cents-per-gb-hour    compute rate per sandbox GiB of memory hour (0.5)
//	FACTORY_TEMPORAL_WAIT    --temporal-wait how long serve retries an unreachable TEMPORAL_ADDRESS (60s)
//	FACTORY_OPS_ADDR         --ops-addr      /healthz, /readyz, /metrics of a worker-only process (127.0.0.1:9090; "off")
//	FACTORY_WORKER_MAX_STEPS --worker-max-steps  steps (and sandbox acquisitions) a worker runs at once (64)
//	FACTORY_WORKER_POLLERS   --worker-pollers    long polls a worker keeps open per task queue and kind of task (8)
//	FACTORY_SNAPSHOT_URL     --snapshot-url  where snapshot archives go: file:///dir or s3://bucket?region=… (file://<data-dir>/snapshots)
//	FACTORY_CONFIG           --config        server configuration file (TOML: harnesses, inference, router); unset = none
//	FACTORY_DB_* and FACTORY_SQLITE_READERS  the store's connection pools (see poolFromEnv)
//	FACTORY_SHUTDOWN_GRACE     --shutdown-grace      how long a stopping worker lets running steps finish (5m)
//	FACTORY_RECONCILE_INTERVAL --reconcile-interval  how often workers reconcile unfinished records with Temporal (30s)
//	FACTORY_RECONCILE_GRACE    --reconcile-grace     age of a queued record before it counts as never started (15s)
//	FACTORY_INFERENCE_GATEWAY_URL --inference-gateway-url  base URL steps reach the inference gateway at (http://<addr>/inference/v1)
//	GOGC                                     Go's collector target; serve runs with 200 unless it is set (gc.go)
type config struct {
	HTTPAddr       string
	DataDir        string
	DatabaseURL    string
	BootstrapToken string
	// TokenKey is FACTORY_TOKEN_KEY (a secret, see loadTokenKey).
	TokenKey     string
	Roles        map[string]bool
	MaxBodyBytes int64
	// MaxConcurrentReads is api.Config.MaxConcurrentReads (0: its default,
	// negative: unbounded).
	MaxConcurrentReads int
	LogLevel           slog.Level
	// LogFormat is text or json; "" picks text on a terminal, else json.
	LogFormat         string
	TemporalAddress   string
	TemporalNamespace string
	TemporalUIAddr    string
	TemporalLogLevel  string
	TemporalPort      int
	// TemporalAuth is how the client authenticates to TEMPORAL_ADDRESS.
	TemporalAuth temporalAuth
	// IntegrationSecrets are the signing secrets of integration providers.
	IntegrationSecrets map[string]string
	// Rates price sandbox time (compute_cost_cents).
	Rates activities.CostRates
	// SandboxIsolation is the local driver's isolation: bwrap or none.
	SandboxIsolation string
	// Scale holds the scale-out settings (scale.go).
	Scale scaleConfig
	// ConfigFile is the server configuration file read into Agents ("" = none).
	ConfigFile string
	// Agents is the parsed configuration file; nil without one.
	Agents *agentconf.Config
	// Pool sizes the store's connection pools.
	Pool store.Pool
	// ShutdownGrace is how long a stopping worker lets running steps finish.
	ShutdownGrace time.Duration
	// ReconcileInterval and ReconcileGrace drive the reconciler.
	ReconcileInterval time.Duration
	ReconcileGrace    time.Duration
	// Inference is the file's [inference] and [router] as the router and
	// the inference gateway use them (set by serve, routing.go), the
	// gateway reached at InferenceGatewayURL.
	Inference           *inference.Config
	InferenceGatewayURL string
	// TemporalPortsExplicit is true when the embedded server's ports were
	// configured; otherwise busy defaults fall back to free ports.
	TemporalPortsExplicit bool
}

// envDuration reads a Go duration from the environment; a malformed value
// becomes the flag's default and is reported by the flag parser's check.
func envDuration(name string, def time.Duration) time.Duration {
	if v := os.Getenv(name); v != "" {
		if d, err := time.ParseDuration(v); err == nil {
			return d
		}
		return -1
	}
	return def
}

func env(name, def string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return def
}

// loadConfig reads flags from args over the environment.
func loadConfig(name string, args []string) (config, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	var (
		c        config
		roles    string
		maxBody  string
		logLevel string
		port     string
	)
	fs.StringVar(&c.HTTPAddr, "addr", env("FACTORY_HTTP_ADDR", "127.0.0.1:8080"), "API listen address (FACTORY_HTTP_ADDR)")
	fs.StringVar(&c.DataDir, "data-dir", env("FACTORY_DATA_DIR", ".factory"), "data directory (FACTORY_DATA_DIR)")
	fs.StringVar(&c.DatabaseURL, "database-url", env("FACTORY_DATABASE_URL", ""), "store DSN (FACTORY_DATABASE_URL; default <data-dir>/factory.db)")
	fs.StringVar(&roles, "roles", env("FACTORY_ROLES", "api,worker"), "roles to run: api, worker (FACTORY_ROLES)")
	fs.StringVar(&maxBody, "max-body-bytes", env("FACTORY_MAX_BODY_BYTES", "4194304"), "request body limit (FACTORY_MAX_BODY_BYTES)")
	parseReads := c.readsFlag(fs)
	fs.StringVar(&c.InferenceGatewayURL, "inference-gateway-url", env("FACTORY_INFERENCE_GATEWAY_URL", ""), "base URL steps reach the inference gateway at (FACTORY_INFERENCE_GATEWAY_URL; default http://<addr>/inference/v1)")
	fs.StringVar(&logLevel, "log-level", env("FACTORY_LOG_LEVEL", "info"), "log level (FACTORY_LOG_LEVEL)")
	fs.StringVar(&c.LogFormat, "log-format", env("FACTORY_LOG_FORMAT", ""), "log format: text or json (FACTORY_LOG_FORMAT; default text on a terminal, json otherwise)")
	fs.StringVar(&c.TemporalAddress, "temporal-address", env("TEMPORAL_ADDRESS", ""), "existing Temporal frontend host:port (TEMPORAL_ADDRESS); empty starts an embedded server")
	fs.StringVar(&c.TemporalNamespace, "temporal-namespace", env("TEMPORAL_NAMESPACE", "default"), "Temporal namespace (TEMPORAL_NAMESPACE)")
	fs.StringVar(&c.TemporalUIAddr, "temporal-ui-addr", env("FACTORY_TEMPORAL_UI_ADDR", "127.0.0.1:8233"), "embedded Temporal Web UI address, or off (FACTORY_TEMPORAL_UI_ADDR)")
	fs.StringVar(&c.TemporalLogLevel, "temporal-log-level", env("FACTORY_TEMPORAL_LOG_LEVEL", "error"), "embedded Temporal server log level: debug, info, warn, error (FACTORY_TEMPORAL_LOG_LEVEL)")
	fs.StringVar(&port, "temporal-port", env("FACTORY_TEMPORAL_PORT", "7233"), "embedded Temporal frontend port (FACTORY_TEMPORAL_PORT)")
	parseRates := c.rateFlags(fs)
	fs.StringVar(&c.SandboxIsolation, "sandbox-isolation", env("FACTORY_SANDBOX_ISOLATION", "bwrap"),
		"sandbox isolation: bwrap, or none to run steps on the host (FACTORY_SANDBOX_ISOLATION)")
	scaleFlags := c.Scale.flags(fs)
	c.TemporalAuth.flags(fs)
	fs.StringVar(&c.ConfigFile, "config", env("FACTORY_CONFIG", ""), "server configuration file: harnesses, inference, router (FACTORY_CONFIG)")
	c.workerFlags(fs)
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.ReconcileInterval <= 0 || c.ReconcileGrace <= 0 || c.ShutdownGrace < 0 {
		return c, fmt.Errorf("--reconcile-interval and --reconcile-grace must be positive durations, --shutdown-grace a duration")
	}
	c.TemporalPortsExplicit = temporalPortsExplicit(fs)
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if err := c.readSecrets(); err != nil {
		return c, err
	}
	var err error
	if c.Roles, err = parseRoles(roles); err != nil {
		return c, err
	}
	if err := c.parseSettings(maxBody, logLevel, port); err != nil {
		return c, err
	}
	if err := errors.Join(parseReads(), parseRates()); err != nil {
		return c, err
	}
	if c.DatabaseURL == "" {
		c.DatabaseURL = filepath.Join(c.DataDir, "factory.db")
	}
	if err := c.Scale.parse(fs, scaleFlags, c.DataDir); err != nil {
		return c, err
	}
	if c.ConfigFile != "" {
		ac, err := readAgentConfig(c.ConfigFile)
		if err != nil {
			return c, err
		}
		c.Agents = ac
	}
	if c.Pool, err = poolFromEnv(); err != nil {
		return c, err
	}
	return c, nil
}

// readSecrets reads the secrets that come from the environment only.
func (c *config) readSecrets() error {
	c.BootstrapToken = os.Getenv("FACTORY_BOOTSTRAP_TOKEN")
	c.TokenKey = os.Getenv("FACTORY_TOKEN_KEY")
	var err error
	if c.IntegrationSecrets, err = integrationSecrets(os.Getenv("FACTORY_INTEGRATION_SECRETS")); err != nil {
		return err
	}
	return c.TemporalAuth.parse(c.TemporalAddress != "")
}

// workerFlags registers a worker's drain and reconcile durations.
func (c *config) workerFlags(fs *flag.FlagSet) {
	fs.DurationVar(&c.ShutdownGrace, "shutdown-grace", envDuration("FACTORY_SHUTDOWN_GRACE", 5*time.Minute),
		"how long a stopping worker lets running steps finish before handing them over (FACTORY_SHUTDOWN_GRACE)")
	fs.DurationVar(&c.ReconcileInterval, "reconcile-interval", envDuration("FACTORY_RECONCILE_INTERVAL", 30*time.Second),
		"how often workers reconcile unfinished run records with Temporal (FACTORY_RECONCILE_INTERVAL)")
	fs.DurationVar(&c.ReconcileGrace, "reconcile-grace", envDuration("FACTORY_RECONCILE_GRACE", activities.DefaultReconcileGrace),
		"age of a queued record before the reconciler counts it as never started (FACTORY_RECONCILE_GRACE)")
}

// readsFlag registers --max-concurrent-reads; its parse sets
// c.MaxConcurrentReads.
func (c *config) readsFlag(fs *flag.FlagSet) (parse func() error) {
	var v string
	fs.StringVar(&v, "max-concurrent-reads", env("FACTORY_MAX_CONCURRENT_READS", ""),
		"authenticated GETs served at once, the rest wait their turn (FACTORY_MAX_CONCURRENT_READS; default 4 per CPU, 0 = unbounded)")
	return func() (err error) {
		c.MaxConcurrentReads, err = parseConcurrentReads(v)
		return err
	}
}

// rateFlags registers the compute rates' flags; their parse sets c.Rates.
func (c *config) rateFlags(fs *flag.FlagSet) (parse func() error) {
	var vcpuRate, gbRate string
	fs.StringVar(&vcpuRate, "cents-per-vcpu-hour", env("FACTORY_CENTS_PER_VCPU_HOUR", strconv.FormatFloat(activities.DefaultCostRates.CentsPerVCPUHour, 'f', -1, 64)),
		"compute rate in cents per sandbox vCPU hour (FACTORY_CENTS_PER_VCPU_HOUR)")
	fs.StringVar(&gbRate, "cents-per-gb-hour", env("FACTORY_CENTS_PER_GB_HOUR", strconv.FormatFloat(activities.DefaultCostRates.CentsPerGBHour, 'f', -1, 64)),
		"compute rate in cents per sandbox GiB of memory hour (FACTORY_CENTS_PER_GB_HOUR)")
	return func() (err error) {
		if c.Rates.CentsPerVCPUHour, err = parseRate("--cents-per-vcpu-hour", vcpuRate); err != nil {
			return err
		}
		c.Rates.CentsPerGBHour, err = parseRate("--cents-per-gb-hour", gbRate)
		return err
	}
}

// parseConcurrentReads parses --max-concurrent-reads: "" is the API's
// default (0), "0" unbounded (-1), else a positive bound.
func parseConcurrentReads(v string) (int, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	switch {
	case err != nil || n < 0:
		return 0, fmt.Errorf("--max-concurrent-reads: %q is not a non-negative integer", v)
	case n == 0:
		return -1, nil
	}
	return n, nil
}

// parseSettings parses the body limit, log level and format, and the
// embedded Temporal server's port into c.
func (c *config) parseSettings(maxBody, logLevel, port string) error {
	n, err := strconv.ParseInt(maxBody, 10, 64)
	if err != nil || n <= 0 {
		return fmt.Errorf("--max-body-bytes: %q is not a positive integer", maxBody)
	}
	c.MaxBodyBytes = n
	if err := c.LogLevel.UnmarshalText([]byte(logLevel)); err != nil {
		return fmt.Errorf("--log-level: %v", err)
	}
	if c.LogFormat != "" && c.LogFormat != "text" && c.LogFormat != "json" {
		return fmt.Errorf("--log-format: %q is not text or json", c.LogFormat)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p <= 0 || p > 65535 {
		return fmt.Errorf("--temporal-port: %q is not a port", port)
	}
	c.TemporalPort = p
	return nil
}

// temporalPortsExplicit tells whether the embedded Temporal server's ports
// were set by flag or environment.
func temporalPortsExplicit(fs *flag.FlagSet) bool {
	explicit := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "temporal-port" || f.Name == "temporal-ui-addr" {
			explicit = true
		}
	})
	for _, name := range []string{"FACTORY_TEMPORAL_PORT", "FACTORY_TEMPORAL_UI_ADDR"} {
		if os.Getenv(name) != "" {
			explicit = true
		}
	}
	return explicit
}

// integrationSecrets parses FACTORY_INTEGRATION_SECRETS: provider=secret
// pairs separated by commas.
func integrationSecrets(raw string) (map[string]string, error) {
	secrets := map[string]string{}
	if raw == "" {
		return secrets, nil
	}
	for _, pair := range strings.Split(raw, ",") {
		provider, secret, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || provider == "" || secret == "" {
			return secrets, fmt.Errorf("FACTORY_INTEGRATION_SECRETS: %q is not provider=secret", pair)
		}
		secrets[provider] = secret
	}
	return secrets, nil
}

// parseRoles parses --roles: api, worker or both, separated by commas.
func parseRoles(roles string) (map[string]bool, error) {
	set := map[string]bool{}
	for _, r := range strings.Split(roles, ",") {
		r = strings.TrimSpace(r)
		if r == "" {
			continue
		}
		if r != "api" && r != "worker" {
			return set, fmt.Errorf("--roles: unknown role %q (api, worker)", r)
		}
		set[r] = true
	}
	if len(set) == 0 {
		return set, fmt.Errorf("--roles: at least one of api, worker")
	}
	return set, nil
}

// parseRate parses a cost rate flag: a non-negative number.
func parseRate(flagName, raw string) (float64, error) {
	f, err := strconv.ParseFloat(raw, 64)
	if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, fmt.Errorf("%s: %q is not a non-negative number", flagName, raw)
	}
	return f, nil
}

// readAgentConfig reads and parses the server configuration file once; its
// errors name the file, the key and the reason.
func readAgentConfig(file string) (*agentconf.Config, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	return agentconf.Parse(data, file)
}

// checkTopology rejects a split role without an external Temporal: an
// API-only or worker-only process with its own embedded server would share
// no workflows with its peers (an API that never runs anything).
func (c config) checkTopology() error {
	if c.TemporalAddress == "" && !(c.Roles["api"] && c.Roles["worker"]) {
		return fmt.Errorf("--roles %s needs TEMPORAL_ADDRESS (--temporal-address): the embedded Temporal server serves only a process that runs both roles", strings.Join(c.roleList(), ","))
	}
	return nil
}

func (c config) roleList() []string {
	var out []string
	for _, r := range []string{"api", "worker"} {
		if c.Roles[r] {
			out = append(out, r)
		}
	}
	return out
}
