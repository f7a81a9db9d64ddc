package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/linefactory/linefactory/activities"
	"github.com/linefactory/linefactory/api"
	"github.com/linefactory/linefactory/store"
)

// runServe implements `factoryd serve`.
func runServe(args []string) int {
	cfg, err := loadConfig("serve", args)
	if err == nil {
		err = cfg.checkTopology()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "factoryd serve: %v\n", err)
		return 2
	}
	scrubSecrets(&cfg)
	logger := newLogger(cfg, os.Stderr)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, cfg, logger, nil, os.Stderr); err != nil {
		logger.Error("factoryd stopped", slog.String("error", err.Error()))
		return 1
	}
	return 0
}

// serve runs the configured roles until ctx is done, then shuts down
// gracefully: in-flight requests finish. ready, if not nil, receives the API
// address once it listens.
// banner, if not nil, receives a short human summary once the API listens.
func serve(ctx context.Context, cfg config, logger *slog.Logger, ready chan<- string, banner io.Writer) error {
	setGCPercent()
	if err := privateDataDir(cfg.DataDir); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	st, err := openStore(ctx, cfg.DatabaseURL, cfg.Pool, max(cfg.Scale.TemporalWait, 10*time.Second), logger)
	if err != nil {
		return err
	}
	defer st.Close()
	privateStore(cfg)
	// Tokens are the API's: a worker-only process has no key of its own
	// to hash them with.
	var tokenKey api.TokenKey
	if cfg.Roles["api"] {
		if tokenKey, err = loadTokenKey(cfg.TokenKey, tokenKeyPath(cfg.DataDir)); err != nil {
			return err
		}
		if err := seedBootstrapToken(ctx, st, tokenKey, cfg.BootstrapToken); err != nil {
			return fmt.Errorf("bootstrap token: %w", err)
		}
	}

	// The API listens before the worker starts, so steps get the gateway's
	// address (routing.go).
	var ln net.Listener
	var apiAddr net.Addr
	if cfg.Roles["api"] {
		if ln, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
			return fmt.Errorf("listen on %s: %w", cfg.HTTPAddr, err)
		}
		defer ln.Close()
		apiAddr = ln.Addr()
	}
	cfg.Inference = inferenceSettings(cfg.Agents, gatewayURL(cfg.InferenceGatewayURL, apiAddr), logger)

	rt, err := startRuntime(ctx, cfg, st, logger)
	if err != nil {
		return err
	}
	defer rt.Close()

	if !cfg.Roles["api"] {
		return serveWorker(ctx, cfg, rt, st, logger)
	}
	return serveAPI(ctx, cfg, rt, st, ln, tokenKey, logger, ready, banner)
}

// serveWorker runs a worker-only process: its ops endpoint until ctx ends.
func serveWorker(ctx context.Context, cfg config, rt *runtime, st *store.Store, logger *slog.Logger) error {
	ready := rt.ReadyChecks()
	ready["store"] = st.Ping
	if err := serveOps(ctx, cfg.Scale.OpsAddr, cfg.Scale.OpsExplicit, ready, append(rt.workers.metrics(), activities.Collectors()...), logger); err != nil {
		return err
	}
	logger.Info("worker running", slog.Any("roles", cfg.Roles))
	<-ctx.Done()
	return nil
}

// serveAPI serves the API on ln until ctx ends, then lets in-flight
// requests finish.
func serveAPI(ctx context.Context, cfg config, rt *runtime, st *store.Store, ln net.Listener, tokenKey api.TokenKey, logger *slog.Logger,
	ready chan<- string, banner io.Writer) error {
	srv := api.New(api.Config{MaxBodyBytes: cfg.MaxBodyBytes, MaxConcurrentReads: cfg.MaxConcurrentReads, Logger: logger, ReadyChecks: rt.ReadyChecks(), Runs: rt,
		IntegrationSecrets: cfg.IntegrationSecrets, Metrics: append(rt.workers.metrics(), activities.Collectors()...), Agents: cfg.Agents,
		TokenKey: tokenKey, Inference: cfg.Inference}, st)
	httpSrv := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	// Followed logs last as long as their run: end them so that Shutdown
	// only waits for ordinary in-flight requests.
	httpSrv.RegisterOnShutdown(srv.Drain)
	errc := make(chan error, 1)
	go func() { errc <- httpSrv.Serve(ln) }()
	addr := ln.Addr().String()
	logger.Info("API listening", slog.String("addr", "http://"+addr), slog.String("store", redact(cfg.DatabaseURL)))
	if cfg.BootstrapToken == "" {
		logger.Info("to get an API token: " + tokenHint(cfg) + " (or set FACTORY_BOOTSTRAP_TOKEN)")
	}
	if banner != nil {
		printBanner(banner, cfg, addr, rt.uiURL())
	}
	if ready != nil {
		ready <- addr
	}
	select {
	case err := <-errc:
		return fmt.Errorf("http server: %w", err)
	case <-ctx.Done():
	}
	logger.Info("shutting down: waiting for in-flight requests")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := httpSrv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		_ = httpSrv.Close()
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

// redact hides a password in a DSN for logs.
func redact(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
			return u.String()
		}
	}
	return dsn
}
