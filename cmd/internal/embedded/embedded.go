// Package embedded runs a Temporal server and its Web UI inside the factoryd
// process, persisted in a SQLite file of the data directory.
//
// Invariants:
//   - One process per data directory: Start takes an exclusive file lock
//     (<data-dir>/temporal.lock) and fails clearly when another holds it.
//   - Everything listens on loopback only. The frontend uses the configured
//     port; the other services take free ports.
//   - Only callers with a key of this start use the frontend; the other
//     ports speak only mutual TLS with a certificate of this start (auth.go).
//   - The database (<data-dir>/temporal.db, WAL, one connection, one history
//     shard) persists across restarts, so workflows survive them. Cluster
//     membership rows do not: they belong to a previous process (see
//     clearMembership).
//   - This is the only package that links go.temporal.io/server.
package embedded

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/linefactory/linefactory/cmd/internal/ports"
	"go.temporal.io/server/common/authorization"
	"go.temporal.io/server/common/cluster"
	tconfig "go.temporal.io/server/common/config"
	"go.temporal.io/server/common/dynamicconfig"
	"go.temporal.io/server/common/log"
	sqliteplugin "go.temporal.io/server/common/persistence/sql/sqlplugin/sqlite"
	"go.temporal.io/server/schema/sqlite"
	"go.temporal.io/server/temporal"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Config configures the embedded server.
type Config struct {
	// DataDir holds temporal.db and temporal.lock.
	DataDir string
	// Namespace is created at start if missing; default "default".
	Namespace string
	// FrontendPort is the gRPC port on 127.0.0.1; 0 picks a free one.
	FrontendPort int
	// UIAddr is the Web UI address (host:port); "" or "off" disables it.
	UIAddr string
	// LogLevel is the server's own log level (JSON on stderr); default
	// "error": a healthy single node has little to say worth reading.
	LogLevel string
}

// Server is a running embedded Temporal server.
type Server struct {
	srv       temporal.Server
	ui        *http.Server
	lock      *os.File
	frontend  string
	uiURL     string
	namespace string
	apiKey    string
	// quiet silences the server's log while it stops (newServer).
	quiet zap.AtomicLevel
}

// FrontendAddr is the host:port SDK clients dial.
func (s *Server) FrontendAddr() string { return s.frontend }

// UIURL is the Web UI's address, or "" when it is disabled.
func (s *Server) UIURL() string { return s.uiURL }

// Namespace is the namespace created at start.
func (s *Server) Namespace() string { return s.namespace }

// APIKey is the key this start's frontend admits as admin: clients send it
// as `authorization: Bearer <key>` (the SDK's client.NewAPIKeyStaticCredentials,
// with TLS disabled). It is also in APIKeyFile in the data directory.
func (s *Server) APIKey() string { return s.apiKey }

// dynamicConfig tunes a single node for latency (see DESIGN.md, measured
// here: a regular activity round trip drops from ~51 ms to ~5 ms).
func dynamicConfig() dynamicconfig.StaticClient {
	v := func(x any) []dynamicconfig.ConstrainedValue { return []dynamicconfig.ConstrainedValue{{Value: x}} }
	return dynamicconfig.StaticClient{
		dynamicconfig.MakeKey("history.transferProcessorMaxPollRPS"):                 v(1000),
		dynamicconfig.MakeKey("matching.numTaskqueueReadPartitions"):                 v(1),
		dynamicconfig.MakeKey("matching.numTaskqueueWritePartitions"):                v(1),
		dynamicconfig.MakeKey("history.longPollExpirationInterval"):                  v(2 * time.Second),
		dynamicconfig.MakeKey("system.forceSearchAttributesCacheRefreshOnRead"):      v(true),
		dynamicconfig.MakeKey("frontend.enableUpdateWorkflowExecution"):              v(true),
		dynamicconfig.MakeKey("frontend.enableUpdateWorkflowExecutionAsyncAccepted"): v(true),
		dynamicconfig.MakeKey("frontend.workerVersioningDataAPIs"):                   v(false),
	}
}

// Start starts the server (and the UI) and returns once the frontend
// accepts connections.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Namespace == "" {
		cfg.Namespace = "default"
	}
	if cfg.LogLevel == "" {
		cfg.LogLevel = "error"
	}
	lock, err := lockDataDir(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	s := &Server{lock: lock, namespace: cfg.Namespace}
	ok := false
	defer func() {
		if !ok {
			s.release()
		}
	}()
	sqlCfg, err := prepareStore(cfg)
	if err != nil {
		return nil, err
	}
	uiKey, err := s.makeKeys(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	if s.quiet, err = zap.ParseAtomicLevel(cfg.LogLevel); err != nil { // raised to fatal by Stop
		return nil, fmt.Errorf("embedded temporal: log level: %w", err)
	}
	if err := s.startServer(cfg, sqlCfg, newKeyClaims(s.apiKey, uiKey)); err != nil {
		return nil, err
	}
	if err := waitTCP(ctx, s.frontend, 30*time.Second); err != nil {
		return nil, fmt.Errorf("embedded temporal: frontend: %w", err)
	}
	if cfg.UIAddr != "" && cfg.UIAddr != "off" {
		if err := s.startUI(cfg.UIAddr, cfg.Namespace, uiKey); err != nil {
			return nil, err
		}
	}
	ok = true
	return s, nil
}

// startAttempts bounds the starts of the server with fresh ports.
const startAttempts = 3

// startServer starts the server on ports chosen just before: the frontend's
// (cfg.FrontendPort, or a free one) and free ones for the other services.
// A port another process took between being chosen and bound fails the
// start (errPortTaken); it is tried again with fresh ports, unless the
// port taken is one the configuration names.
func (s *Server) startServer(cfg Config, sqlCfg *tconfig.SQL, claims authorization.ClaimMapper) error {
	for attempt := 1; ; attempt++ {
		port := cfg.FrontendPort
		if port == 0 {
			var err error
			if port, err = ports.Free(); err != nil {
				return err
			}
		}
		s.frontend = "127.0.0.1:" + strconv.Itoa(port)
		conf, err := serverConfig(s.frontend, port, sqlCfg)
		if err != nil {
			return err
		}
		s.srv, err = newServer(conf, cfg.LogLevel, claims, s.quiet)
		if err == nil {
			return nil
		}
		// startFatal's message ends with the address in parentheses.
		explicit := cfg.FrontendPort != 0 && strings.Contains(err.Error(), "("+s.frontend+")")
		if !errors.Is(err, errPortTaken) || explicit || attempt == startAttempts {
			return err
		}
		// The failed start may have recorded its members (and ports).
		if err := clearMembership(sqlCfg.DatabaseName); err != nil {
			return fmt.Errorf("embedded temporal: %w", err)
		}
	}
}

// makeKeys makes this start's API key (kept in s and in the key file) and
// the Web UI's key (returned, kept nowhere else).
func (s *Server) makeKeys(dir string) (string, error) {
	var err error
	if s.apiKey, err = newKey(); err != nil {
		return "", fmt.Errorf("embedded temporal: key: %w", err)
	}
	if err := writeKeyFile(dir, s.apiKey); err != nil {
		return "", fmt.Errorf("embedded temporal: key file: %w", err)
	}
	uiKey, err := newKey()
	if err != nil {
		return "", fmt.Errorf("embedded temporal: key: %w", err)
	}
	return uiKey, nil
}

// lockDataDir makes the data dir and takes its lock: one server per data
// dir.
func lockDataDir(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("embedded temporal: %w", err)
	}
	lockPath := filepath.Join(dir, "temporal.lock")
	lock, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("embedded temporal: lock: %w", err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("embedded temporal: data dir %s is in use by another factoryd (lock %s held)", dir, lockPath)
	}
	return lock, nil
}

// prepareStore sets up the SQLite database (schema, no stale membership,
// the namespace) and returns its persistence config.
func prepareStore(cfg Config) (*tconfig.SQL, error) {
	dbPath := filepath.Join(cfg.DataDir, "temporal.db")
	sqlCfg := &tconfig.SQL{
		PluginName:   sqliteplugin.PluginName,
		DatabaseName: dbPath,
		// Keys the plugin does not know become `PRAGMA key=value` on every
		// connection, so they are pragma names (a leading underscore would
		// make a pragma SQLite ignores).
		ConnectAttributes: map[string]string{
			"mode": "rwc", "journal_mode": "wal", "synchronous": "normal",
		},
		MaxConns:     1,
		MaxIdleConns: 1,
	}
	if _, err := os.Stat(dbPath); errors.Is(err, os.ErrNotExist) {
		if err := sqlite.SetupSchema(sqlCfg); err != nil {
			return nil, fmt.Errorf("embedded temporal: set up schema: %w", err)
		}
	}
	if err := clearMembership(dbPath); err != nil {
		return nil, fmt.Errorf("embedded temporal: %w", err)
	}
	ns, err := sqlite.NewNamespaceConfig("active", cfg.Namespace, false, nil)
	if err != nil {
		return nil, fmt.Errorf("embedded temporal: namespace: %w", err)
	}
	ns.Detail.Config.Retention = durationpb.New(72 * time.Hour)
	if err := sqlite.CreateNamespaces(sqlCfg, ns); err != nil {
		return nil, fmt.Errorf("embedded temporal: create namespace: %w", err)
	}
	return sqlCfg, nil
}

// services gives each Temporal service its ports on loopback: the
// frontend's is frontendPort, the others free ones. The internal frontend
// serves the server's own callers (see auth.go).
func services(frontendPort int) (map[string]tconfig.Service, error) {
	out := map[string]tconfig.Service{}
	for name, grpcPort := range map[string]int{"frontend": frontendPort, "internal-frontend": 0, "history": 0, "matching": 0, "worker": 0} {
		if grpcPort == 0 {
			p, err := ports.Free()
			if err != nil {
				return nil, err
			}
			grpcPort = p
		}
		mp, err := ports.Free()
		if err != nil {
			return nil, err
		}
		out[name] = tconfig.Service{RPC: tconfig.RPC{GRPCPort: grpcPort, MembershipPort: mp, BindOnIP: "127.0.0.1"}}
	}
	return out, nil
}

// serverConfig is a single-node cluster on loopback over sqlCfg.
func serverConfig(frontend string, port int, sqlCfg *tconfig.SQL) (*tconfig.Config, error) {
	svcs, err := services(port)
	if err != nil {
		return nil, err
	}
	return &tconfig.Config{
		Global: tconfig.Global{
			Membership: tconfig.Membership{MaxJoinDuration: 30 * time.Second, BroadcastAddress: "127.0.0.1"},
		},
		Persistence: tconfig.Persistence{
			DefaultStore:     sqliteplugin.PluginName,
			VisibilityStore:  sqliteplugin.PluginName,
			NumHistoryShards: 1,
			DataStores:       map[string]tconfig.DataStore{sqliteplugin.PluginName: {SQL: sqlCfg}},
		},
		ClusterMetadata: &cluster.Config{
			EnableGlobalNamespace:    false,
			FailoverVersionIncrement: 10,
			MasterClusterName:        "active",
			CurrentClusterName:       "active",
			ClusterInformation: map[string]cluster.ClusterInformation{
				"active": {Enabled: true, InitialFailoverVersion: 1, RPCAddress: frontend},
			},
		},
		DCRedirectionPolicy: tconfig.DCRedirectionPolicy{Policy: "noop"},
		Services:            svcs,
		Archival: tconfig.Archival{
			History:    tconfig.HistoryArchival{State: "disabled"},
			Visibility: tconfig.VisibilityArchival{State: "disabled"},
		},
		// No public client: the server's own callers find the internal
		// frontend through membership and call it over mutual TLS.
		NamespaceDefaults: tconfig.NamespaceDefaults{Archival: tconfig.ArchivalNamespaceDefaults{
			History:    tconfig.HistoryArchivalNamespaceDefaults{State: "disabled"},
			Visibility: tconfig.VisibilityArchivalNamespaceDefaults{State: "disabled"},
		}},
	}, nil
}

// newServer creates and starts the Temporal server: the public frontend
// authorizes callers by the roles claims gives them (the internal one
// admits every caller that got through its mutual TLS).
//
// The server ends the process on a fatal log (zap's Fatal), which is how it
// reports a port it cannot bind. While newServer runs, a fatal log panics
// instead (fatalHook) and newServer returns it as an error, stopping what
// started; errPortTaken when a port was in use.
func newServer(conf *tconfig.Config, logLevel string, claims authorization.ClaimMapper, quiet zap.AtomicLevel) (srv temporal.Server, err error) {
	hook := &fatalHook{}
	hook.starting.Store(true)
	defer hook.starting.Store(false)
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		f, ok := r.(startFatal)
		if !ok {
			panic(r)
		}
		if srv != nil {
			stopQuietly(srv, quiet)
		}
		srv, err = nil, fmt.Errorf("embedded temporal: %s", f.msg)
		if strings.Contains(f.msg, "address already in use") {
			err = fmt.Errorf("%w: %w", errPortTaken, err)
		}
	}()
	// quiet is lowered to nothing but fatal while the server stops: its
	// services then log errors about each other being gone (matching's
	// "Not enough hosts to serve the request"), which are not failures.
	logger := log.NewZapLogger(log.BuildZapLogger(log.Config{Level: logLevel, Format: "json"}).
		WithOptions(zap.IncreaseLevel(quiet), zap.WithFatalHook(hook)))
	tlsProvider, err := newInternodeTLS()
	if err != nil {
		return nil, fmt.Errorf("embedded temporal: %w", err)
	}
	srv, err = temporal.NewServer(
		temporal.WithConfig(conf),
		temporal.ForServices(append(slices.Clone(temporal.DefaultServices), "internal-frontend")),
		temporal.WithLogger(logger),
		temporal.WithTLSConfigFactory(tlsProvider),
		temporal.WithAuthorizer(authorization.NewDefaultAuthorizer()),
		temporal.WithClaimMapper(func(*tconfig.Config) authorization.ClaimMapper { return claims }),
		temporal.WithDynamicConfigClient(dynamicConfig()),
	)
	if err != nil {
		return nil, fmt.Errorf("embedded temporal: %w", err)
	}
	if err := srv.Start(); err != nil {
		stopQuietly(srv, quiet)
		return nil, fmt.Errorf("embedded temporal: start: %w", err)
	}
	return srv, nil
}

// errPortTaken is a start that found one of its ports in use.
var errPortTaken = errors.New("a port was taken before the server bound it")

// fatalHook is what a fatal log of the server does after it is written:
// while starting, panic with a startFatal (newServer recovers it); after,
// exit the process as zap's default does.
type fatalHook struct{ starting atomic.Bool }

// startFatal is a fatal log of the server while it starts.
type startFatal struct{ msg string }

func (h *fatalHook) OnWrite(ce *zapcore.CheckedEntry, fields []zapcore.Field) {
	if !h.starting.Load() {
		os.Exit(1)
	}
	msg := ce.Message
	for _, f := range fields {
		switch {
		case f.Key == "error" && f.Interface != nil:
			if e, ok := f.Interface.(error); ok {
				msg += ": " + e.Error()
			}
		case f.Key == "address" && f.Type == zapcore.StringType:
			msg += " (" + f.String + ")"
		}
	}
	panic(startFatal{msg: msg})
}

// stopQuietly stops what a failed start began, ignoring what that says.
func stopQuietly(srv temporal.Server, quiet zap.AtomicLevel) {
	level := quiet.Level()
	quiet.SetLevel(zap.FatalLevel)
	defer quiet.SetLevel(level)
	defer func() { _ = recover() }()
	_ = srv.Stop()
}

// clearMembership deletes the cluster membership rows a previous process
// left in the database. They can only be stale: we hold the data dir's lock.
// Left in place, every member that heartbeated in the last 20 s is a ringpop
// seed; joining those dead addresses takes MaxJoinDuration and a retry
// (measured: ~60 s) during which matching is "Not enough hosts to serve the
// request", so after a crash or restart nothing ran for a minute.
func clearMembership(dbPath string) error {
	db, err := sql.Open("sqlite", "file:"+dbPath+"?_pragma=busy_timeout(5000)")
	if err != nil {
		return fmt.Errorf("clear stale cluster membership: %w", err)
	}
	defer db.Close()
	if _, err := db.Exec("DELETE FROM cluster_membership"); err != nil {
		return fmt.Errorf("clear stale cluster membership: %w", err)
	}
	return nil
}

func waitTCP(ctx context.Context, addr string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s did not accept connections: %w", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop stops the UI and the server and releases the data directory.
func (s *Server) Stop() error {
	if s.ui != nil {
		_ = s.ui.Close()
	}
	var err error
	if s.srv != nil {
		s.quiet.SetLevel(zap.FatalLevel)
		err = s.srv.Stop()
	}
	s.release()
	return err
}

func (s *Server) release() {
	if s.lock != nil {
		_ = syscall.Flock(int(s.lock.Fd()), syscall.LOCK_UN)
		_ = s.lock.Close()
		s.lock = nil
	}
}
