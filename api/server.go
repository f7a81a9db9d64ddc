package api

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/linefactory/linefactory/manifests/agentconf"
	"github.com/linefactory/linefactory/manifests/inference"
	"github.com/linefactory/linefactory/store"
)

// Store is what the API needs of the store (*store.Store satisfies it).
type Store interface {
	Ping(ctx context.Context) error

	DeployJobVersion(ctx context.Context, name string, manifest json.RawMessage, hash string) (store.JobVersion, bool, error)
	ListJobs(ctx context.Context, limit, offset int) ([]store.Job, error)
	GetJob(ctx context.Context, name string) (store.Job, error)
	ListJobVersions(ctx context.Context, name string, limit, offset int) ([]store.JobVersion, error)
	GetJobVersion(ctx context.Context, name, versionID string) (store.JobVersion, error)
	LatestJobVersion(ctx context.Context, name string) (store.JobVersion, error)

	DeployLineVersion(ctx context.Context, name string, manifest, inputParams json.RawMessage, hash string) (store.LineVersion, bool, error)
	ListLines(ctx context.Context, limit, offset int) ([]store.Line, error)
	GetLine(ctx context.Context, name string) (store.Line, error)
	LatestLineVersion(ctx context.Context, name string) (store.LineVersion, error)

	CreateKnowledge(ctx context.Context, v store.KnowledgeVersion) (store.KnowledgeVersion, error)
	AddKnowledgeVersion(ctx context.Context, v store.KnowledgeVersion) (store.KnowledgeVersion, bool, error)
	ListKnowledge(ctx context.Context, limit, offset int) ([]store.KnowledgeItem, error)
	GetKnowledge(ctx context.Context, identifier string) (store.KnowledgeItem, store.KnowledgeVersion, error)
	GetKnowledgeVersion(ctx context.Context, identifier string, n int) (store.KnowledgeVersion, error)

	UpsertLineSchedule(ctx context.Context, sc store.LineSchedule) (store.LineSchedule, error)
	GetLineSchedule(ctx context.Context, line string) (store.LineSchedule, error)
	DeleteLineSchedule(ctx context.Context, line string) error

	CreateToken(ctx context.Context, name, scope, hash string) (store.Token, error)
	FindTokenByHash(ctx context.Context, hash string) (store.Token, error)
	RehashToken(ctx context.Context, id, oldHash, newHash string) error
	ListTokens(ctx context.Context) ([]store.Token, error)
	DeleteToken(ctx context.Context, name string) error
	TouchToken(ctx context.Context, id string, at time.Time) error

	RunStore
	LineRunStore
	RunSearchStore
}

// Config configures the API server.
type Config struct {
	// MaxBodyBytes bounds request bodies (413 beyond it); default 4 MiB.
	MaxBodyBytes int64
	// MaxConcurrentReads bounds the authenticated GETs served at once (the
	// rest wait their turn, first come first served): 0 is
	// DefaultConcurrentReads, negative unbounded. Log follows and the
	// gateway are not counted.
	MaxConcurrentReads int
	// Logger receives structured request logs; default slog.Default().
	Logger *slog.Logger
	// ReadyChecks are run by /readyz besides the store ping (e.g. Temporal).
	ReadyChecks map[string]func(ctx context.Context) error
	// Runs starts and stops runs; nil answers run starts with 503.
	Runs Runs
	// IntegrationSecrets holds a signing secret per provider; events of a
	// provider with a secret need a valid X-Signature-256.
	IntegrationSecrets map[string]string
	// TokenKey keys the hashes of token secrets (see TokenKey).
	TokenKey TokenKey
	// SignatureTolerance is how far an X-Signature-Timestamp may be from
	// now; default 5 minutes.
	SignatureTolerance time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Metrics are more collectors /metrics serves (the worker's capacity).
	Metrics []prometheus.Collector
	// Agents is the server configuration file (harnesses, models, router);
	// nil configures none.
	Agents *agentconf.Config
	// Inference is the endpoint the inference gateway forwards to, with
	// its prices (gateway.go); nil answers the gateway with 503.
	Inference *inference.Config
}

// Server is the REST API.
type Server struct {
	store   Store
	cfg     Config
	log     *slog.Logger
	engine  *gin.Engine
	metrics *metrics
	routes  []Route
	doc     openapiCache
	drain   drain
	// schedules serializes, per line, storing a schedule and handing it to
	// the engine, so the engine always ends with the newest generation.
	schedules keyedMutex
	tokens    tokenCache
	// tokenMACs are HMACs keyed with cfg.TokenKey, reused across requests
	// (see tokenHash).
	tokenMACs sync.Pool
	// reads admits the gated reads (see readGate); nil admits all.
	reads chan struct{}
}

// Route is one registered endpoint and the scope it needs ("" = public).
type Route struct {
	Method, Path, Scope string
}

// Token scopes, each including the ones before it.
const (
	ScopeRead  = "read"
	ScopeWrite = "write"
	ScopeAdmin = "admin"
)

var scopeRank = map[string]int{ScopeRead: 1, ScopeWrite: 2, ScopeAdmin: 3}

// ValidScope tells a known scope.
func ValidScope(s string) bool { return scopeRank[s] > 0 }

// New builds the API on a store.
func New(cfg Config, st Store) *Server {
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 4 << 20
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.SignatureTolerance <= 0 {
		cfg.SignatureTolerance = DefaultSignatureTolerance
	}
	gin.SetMode(gin.ReleaseMode)
	s := &Server{store: st, cfg: cfg, log: cfg.Logger, engine: gin.New(), metrics: newMetrics()}
	if n := cfg.MaxConcurrentReads; n >= 0 {
		if n == 0 {
			n = DefaultConcurrentReads()
		}
		s.reads = make(chan struct{}, n)
	}
	s.tokenMACs.New = func() any { return hmac.New(sha256.New, cfg.TokenKey) }
	s.metrics.registry.MustRegister(cfg.Metrics...)
	e := s.engine
	e.HandleMethodNotAllowed = true
	e.ContextWithFallback = true
	// No HTML redirects: /jobs/ is a JSON 404 like any unknown path.
	e.RedirectTrailingSlash = false
	e.RedirectFixedPath = false
	e.Use(s.requestIDMiddleware, s.logMiddleware, s.recoverMiddleware)
	e.NoRoute(func(c *gin.Context) {
		s.writeError(c, httpError(http.StatusNotFound, CodeNotFound, "no route %s %s", c.Request.Method, c.Request.URL.Path))
	})
	e.NoMethod(func(c *gin.Context) {
		s.writeError(c, httpError(http.StatusMethodNotAllowed, CodeInvalidRequest, "method %s not allowed on %s", c.Request.Method, c.Request.URL.Path))
	})
	s.registerRoutes()
	return s
}

// ServeHTTP serves the API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.engine.ServeHTTP(w, r) }

// Routes lists every registered endpoint.
func (s *Server) Routes() []Route { return append([]Route(nil), s.routes...) }

type handler func(c *gin.Context) error

func (s *Server) handle(method, path, scope string, h handler) {
	s.routes = append(s.routes, Route{Method: method, Path: path, Scope: scope})
	// Auth comes before the body limit, so an unauthenticated request is
	// answered 401 whatever its size.
	chain := []gin.HandlerFunc{}
	if scope != "" {
		chain = append(chain, s.authMiddleware(scope))
	}
	if method == http.MethodGet && scope != "" && !strings.HasSuffix(path, "/logs") && s.reads != nil {
		chain = append(chain, s.readGate)
	}
	chain = append(chain, s.strictQueryMiddleware, s.bodyLimitMiddleware, func(c *gin.Context) {
		if err := h(c); err != nil {
			s.writeError(c, err)
		}
	})
	s.engine.Handle(method, path, chain...)
}

func (s *Server) registerRoutes() {
	// operations (public), also answering HEAD
	for _, m := range []string{http.MethodGet, http.MethodHead} {
		s.handle(m, "/healthz", "", s.healthz)
		s.handle(m, "/readyz", "", s.readyz)
		s.handle(m, "/metrics", "", s.metricsHandler)
		s.handle(m, "/openapi.json", "", s.openapi)
	}
	// jobs
	s.handle(http.MethodPost, "/jobs/:name/versions", ScopeWrite, s.createJobVersion)
	s.handle(http.MethodGet, "/jobs/:name/versions", ScopeRead, s.listJobVersions)
	s.handle(http.MethodGet, "/jobs/:name/versions/:version_id", ScopeRead, s.getJobVersion)
	s.handle(http.MethodGet, "/jobs", ScopeRead, s.listJobs)
	s.handle(http.MethodGet, "/jobs/:name", ScopeRead, s.getJob)
	// job runs
	s.handle(http.MethodPost, "/jobs/:name/runs", ScopeWrite, s.startJobRun)
	s.handle(http.MethodGet, "/jobs/:name/runs", ScopeRead, s.listJobRuns)
	s.handle(http.MethodPost, "/jobs/:name/runs/:run_id/stop", ScopeWrite, s.stopJobRun)
	s.handle(http.MethodGet, "/job-runs/:run_id", ScopeRead, s.getJobRun)
	s.handle(http.MethodGet, "/job-runs/:run_id/logs", ScopeRead, s.jobRunLogs)
	// lines
	s.handle(http.MethodPost, "/factory/lines/:name/deploy", ScopeWrite, s.deployLine)
	s.handle(http.MethodGet, "/factory/lines", ScopeRead, s.listLines)
	s.handle(http.MethodGet, "/factory/lines/:name", ScopeRead, s.getLine)
	s.handle(http.MethodPost, "/factory/lines/:name/runs", ScopeWrite, s.startLineRun)
	s.handle(http.MethodGet, "/factory/lines/:name/runs", ScopeRead, s.listLineRuns)
	s.handle(http.MethodGet, "/factory/line-runs/:run_id", ScopeRead, s.getLineRun)
	s.handle(http.MethodPost, "/factory/line-runs/:run_id/stop", ScopeWrite, s.stopLineRun)
	s.handle(http.MethodPost, "/factory/line-runs/:run_id/control", ScopeWrite, s.controlLineRun)
	s.handle(http.MethodPost, "/factory/webhooks/*path", ScopeWrite, s.webhook)
	s.handle(http.MethodPost, "/factory/integrations/:provider/events", ScopeWrite, s.integrationEvent)
	s.handle(http.MethodPut, "/factory/lines/:name/schedule", ScopeWrite, s.putSchedule)
	s.handle(http.MethodGet, "/factory/lines/:name/schedule", ScopeRead, s.getSchedule)
	s.handle(http.MethodDelete, "/factory/lines/:name/schedule", ScopeWrite, s.deleteSchedule)
	// knowledge
	s.handle(http.MethodPost, "/knowledge", ScopeWrite, s.createKnowledge)
	s.handle(http.MethodPost, "/knowledge/:identifier/versions", ScopeWrite, s.addKnowledgeVersion)
	s.handle(http.MethodGet, "/knowledge", ScopeRead, s.listKnowledge)
	s.handle(http.MethodGet, "/knowledge/:identifier", ScopeRead, s.getKnowledge)
	s.handle(http.MethodGet, "/knowledge/:identifier/versions/:version_number", ScopeRead, s.getKnowledgeVersion)
	// inference gateway: authenticated by a run's own token (gateway.go)
	s.handle(http.MethodPost, gatewayChatCompletions, "", s.gatewayChat)
	s.handle(http.MethodGet, gatewayModels, "", s.gatewayModelsList)
	// tokens
	s.handle(http.MethodPost, "/tokens", ScopeAdmin, s.createToken)
	s.handle(http.MethodGet, "/tokens", ScopeAdmin, s.listTokens)
	s.handle(http.MethodDelete, "/tokens/:name", ScopeAdmin, s.deleteToken)
	s.registerRunSearchRoutes()
	s.registerAgentRoutes()
}

// ---------------------------------------------------------------- middleware

// DefaultConcurrentReads is the default of Config.MaxConcurrentReads: four
// per CPU the process may use.
func DefaultConcurrentReads() int { return 4 * runtime.GOMAXPROCS(0) }

// statusClientClosed is the status a request is logged with when its
// client went away before it was served (nginx's 499): not a server error.
const statusClientClosed = 499

// readGate admits a read once fewer than Config.MaxConcurrentReads are being
// served; the others wait in arrival order (a channel's blocked senders are
// woken first in, first out). Past the cores and the store's connections,
// more reads at once only take turns on them in whatever order the
// schedulers pick, which lengthens the slowest responses without serving
// more (measured in make bench: p99 16–19 → 12–13 ms at 64 clients, the
// same throughput); a client that gives up while waiting leaves the queue.
// The response is held in memory until the slot is given back and sent
// after: a client that reads it slowly (or never) holds no slot, so a few
// such clients cannot stall everyone's reads.
func (s *Server) readGate(c *gin.Context) {
	select {
	case s.reads <- struct{}{}:
	case <-c.Request.Context().Done():
		c.AbortWithStatus(statusClientClosed) // logged and counted so; nobody reads it
		return
	}
	held := &heldResponse{ResponseWriter: c.Writer}
	c.Writer = held
	served := false
	defer func() {
		c.Writer = held.ResponseWriter
		<-s.reads
		if served { // a panic's response is the recoverer's
			held.send()
		}
	}()
	c.Next()
	served = true
}

// heldResponse keeps a response's body (and the moment its header was
// due) until send; headers and the status go to the real writer as set.
type heldResponse struct {
	gin.ResponseWriter
	body  []byte
	wrote bool
}

func (w *heldResponse) Write(p []byte) (int, error) {
	w.wrote, w.body = true, append(w.body, p...)
	return len(p), nil
}

func (w *heldResponse) WriteString(p string) (int, error) {
	w.wrote, w.body = true, append(w.body, p...)
	return len(p), nil
}

// keep holds p, which nobody changes any more, without copying it: the
// response's first write (else it is Write). Its capacity is cut to its
// length, so a later Write appends to a copy, never into p's array.
func (w *heldResponse) keep(p []byte) {
	if w.wrote || len(w.body) > 0 {
		_, _ = w.Write(p)
		return
	}
	w.wrote, w.body = true, p[:len(p):len(p)]
}

func (w *heldResponse) WriteHeaderNow() { w.wrote = true }
func (w *heldResponse) Written() bool   { return w.wrote || w.ResponseWriter.Written() }
func (w *heldResponse) Flush()          {} // sent whole by send

func (w *heldResponse) Size() int {
	if !w.wrote {
		return w.ResponseWriter.Size()
	}
	return len(w.body)
}

// send writes the held header and body to the client.
func (w *heldResponse) send() {
	if !w.wrote {
		return
	}
	w.ResponseWriter.WriteHeaderNow()
	if len(w.body) > 0 {
		_, _ = w.ResponseWriter.Write(w.body)
	}
}

const requestIDKey = "request_id"

var requestIDRE = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

func requestID(c *gin.Context) string { return c.GetString(requestIDKey) }

func (s *Server) requestIDMiddleware(c *gin.Context) {
	rid := c.GetHeader("X-Request-Id")
	if !requestIDRE.MatchString(rid) {
		rid = newRequestID()
	}
	c.Set(requestIDKey, rid)
	c.Header("X-Request-Id", rid)
	c.Next()
}

// newRequestID returns "req_" and 12 random bytes in hex, built in one
// allocation.
func newRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	var id [4 + 2*len(b)]byte
	copy(id[:], "req_")
	hex.Encode(id[4:], b[:])
	return string(id[:])
}

// now is the server's clock in UTC.
func (s *Server) now() time.Time { return s.cfg.Now().UTC() }

func (s *Server) logMiddleware(c *gin.Context) {
	start := time.Now()
	c.Next()
	route := c.FullPath()
	if route == "" {
		route = "unmatched"
	}
	status := c.Writer.Status()
	elapsed := time.Since(start)
	s.metrics.observe(c.Request.Method, route, status, elapsed)
	level := slog.LevelInfo
	if status >= 500 {
		level = slog.LevelError
	}
	s.log.LogAttrs(c.Request.Context(), level, "request",
		slog.String("request_id", requestID(c)), slog.String("method", c.Request.Method),
		slog.String("route", route), slog.String("path", c.Request.URL.Path), slog.Int("status", status),
		slog.Duration("duration", elapsed), slog.String("actor", c.GetString(actorKey)))
}

func (s *Server) recoverMiddleware(c *gin.Context) {
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			s.log.ErrorContext(c.Request.Context(), "panic in handler", slog.String("request_id", requestID(c)),
				slog.Any("panic", p), slog.String("stack", string(debug.Stack())))
			if !c.Writer.Written() {
				s.writeError(c, fmt.Errorf("panic: %v", p))
			}
			c.Abort()
		}
	}()
	c.Next()
}

func (s *Server) bodyLimitMiddleware(c *gin.Context) {
	if c.Request.ContentLength > s.cfg.MaxBodyBytes {
		s.writeError(c, &http.MaxBytesError{Limit: s.cfg.MaxBodyBytes})
		return
	}
	// A request without a body (the server's http.NoBody) has nothing to
	// bound.
	if c.Request.Body != nil && c.Request.Body != http.NoBody {
		c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, s.cfg.MaxBodyBytes)
	}
	c.Next()
}

const actorKey = "actor"

// HashToken is the unkeyed hex SHA-256 of a token secret: how tokens were
// stored before the server key (TokenKey), and still are without one.
func HashToken(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hexString(sum[:])
}

// hexString is hex.EncodeToString of a SHA-256 sum in one allocation.
func hexString(sum []byte) string {
	if len(sum) > sha256.Size {
		return hex.EncodeToString(sum)
	}
	var dst [2 * sha256.Size]byte
	return string(dst[:hex.Encode(dst[:], sum)])
}

// tokenHash is s.cfg.TokenKey.Hash(secret) with an HMAC from s.tokenMACs
// rather than a new one per request.
func (s *Server) tokenHash(secret string) string {
	if len(s.cfg.TokenKey) == 0 {
		return HashToken(secret)
	}
	mac := s.tokenMACs.Get().(hash.Hash)
	mac.Reset()
	_, _ = io.WriteString(mac, secret)
	var sum [sha256.Size]byte
	out := hexString(mac.Sum(sum[:0]))
	s.tokenMACs.Put(mac)
	return out
}

// NewTokenSecret returns a new random 32-byte token secret, hex encoded with
// a recognizable prefix.
func NewTokenSecret() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return "lf_" + hex.EncodeToString(b[:])
}

// bearerToken returns the secret of an "Authorization: Bearer <secret>"
// header; the scheme is case-insensitive (RFC 9110).
func bearerToken(header string) (string, bool) {
	scheme, secret, ok := strings.Cut(strings.TrimSpace(header), " ")
	secret = strings.TrimSpace(secret)
	if !ok || !strings.EqualFold(scheme, "Bearer") || secret == "" {
		return "", false
	}
	return secret, true
}

func (s *Server) authMiddleware(scope string) gin.HandlerFunc {
	return func(c *gin.Context) {
		secret, ok := bearerToken(c.GetHeader("Authorization"))
		if !ok {
			s.writeError(c, httpError(http.StatusUnauthorized, CodeAuthRequired, "a bearer token is required: Authorization: Bearer <token>"))
			return
		}
		hash := s.tokenHash(secret)
		tok, ok := s.tokens.get(hash)
		var err error
		if !ok {
			tok, err = s.tokens.find(c.Request.Context(), hash, func(ctx context.Context, _ string) (store.Token, error) {
				return FindToken(ctx, s.store, s.cfg.TokenKey, secret)
			})
		}
		if errors.Is(err, store.ErrNotFound) || (err == nil && subtle.ConstantTimeCompare([]byte(tok.Hash), []byte(hash)) != 1) {
			s.writeError(c, httpError(http.StatusUnauthorized, CodeAuthRequired, "the bearer token is not valid"))
			return
		}
		if err != nil {
			s.writeError(c, err)
			return
		}
		c.Set(actorKey, tok.Name)
		s.touchToken(c, tok)
		if scopeRank[tok.Scope] < scopeRank[scope] {
			s.writeError(c, httpError(http.StatusForbidden, CodeAccessDenied, "token %q has scope %s; this needs %s", tok.Name, tok.Scope, scope))
			return
		}
		c.Next()
	}
}

// touchToken records that a token was used. A failure is logged, never
// answered: the request itself is authorized.
func (s *Server) touchToken(c *gin.Context, tok *cachedToken) {
	now := s.cfg.Now()
	claimed, undo := tok.claimTouch(now)
	if !claimed {
		return
	}
	if err := s.store.TouchToken(c.Request.Context(), tok.ID, now); err != nil {
		undo()
		s.log.WarnContext(c.Request.Context(), "record token use", slog.String("request_id", requestID(c)),
			slog.String("token", tok.Name), slog.String("error", err.Error()))
	}
}

// jsonContentType is the Content-Type of a JSON response, one slice shared
// by the responses writeJSONDoc writes (gin's c.Data makes one per call).
var jsonContentType = []string{"application/json; charset=utf-8"}

// writeJSONDoc answers 200 with doc, a JSON document as stored, which
// nobody may change any more (a held response keeps it as is, see
// heldResponse.keep: a finished run's document is shared by every read of
// it from the store's cache).
func writeJSONDoc(c *gin.Context, doc []byte) {
	c.Writer.Header()["Content-Type"] = jsonContentType
	c.Status(http.StatusOK)
	if held, ok := c.Writer.(*heldResponse); ok {
		held.keep(doc)
		return
	}
	_, _ = c.Writer.Write(doc)
}

// ---------------------------------------------------------------- operations

func (s *Server) healthz(c *gin.Context) error {
	c.JSON(http.StatusOK, gin.H{"status": "ok"})
	return nil
}

func (s *Server) readyz(c *gin.Context) error {
	ctx, cancel := context.WithTimeout(c.Request.Context(), 3*time.Second)
	defer cancel()
	checks := map[string]string{}
	ready := true
	run := func(name string, f func(context.Context) error) {
		if err := f(ctx); err != nil {
			checks[name] = err.Error()
			ready = false
			return
		}
		checks[name] = "ok"
	}
	run("store", s.store.Ping)
	for name, f := range s.cfg.ReadyChecks {
		run(name, f)
	}
	if !ready {
		rid := requestID(c)
		c.JSON(http.StatusServiceUnavailable, gin.H{"code": CodeResourceUnavailable, "message": "not ready", "request_id": rid, "checks": checks})
		return nil
	}
	c.JSON(http.StatusOK, gin.H{"status": "ready", "checks": checks})
	return nil
}

type metrics struct {
	registry *prometheus.Registry
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec

	mu    sync.RWMutex
	byKey map[seriesKey]series
}

func newMetrics() *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "linefactory_http_requests_total", Help: "HTTP requests by method, route template and status.",
		}, []string{"method", "route", "status"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "linefactory_http_request_duration_seconds", Help: "HTTP request latency by method, route template and status.",
			Buckets: prometheus.DefBuckets,
		}, []string{"method", "route", "status"}),
	}
	m.registry.MustRegister(m.requests, m.latency, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	return m
}

func (m *metrics) observe(method, route string, status int, d time.Duration) {
	o := m.series(metricMethod(method), route, status)
	o.requests.Inc()
	o.latency.Observe(d.Seconds())
}

// metricMethod is a request method as a label: the standard ones as
// they are, any other "other". A client picks the method, and each label
// value would be a series (and a cache entry) kept for good: an
// unauthenticated client sending made-up methods would grow them without
// bound.
func metricMethod(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "other"
}

// seriesKey names the series of one method, route and status.
type seriesKey struct {
	method, route string
	status        int
}

// series are a seriesKey's counter and histogram, looked up once.
type series struct {
	requests prometheus.Counter
	latency  prometheus.Observer
}

// series returns the series of method, route and status; after the first
// request of a kind, without allocating (the label values, the status as a
// string and the vectors' lookups were a few allocations per request). There
// is one entry per series the vectors hold.
func (m *metrics) series(method, route string, status int) series {
	k := seriesKey{method, route, status}
	m.mu.RLock()
	o, ok := m.byKey[k]
	m.mu.RUnlock()
	if ok {
		return o
	}
	code := strconv.Itoa(status)
	o = series{requests: m.requests.WithLabelValues(method, route, code), latency: m.latency.WithLabelValues(method, route, code)}
	m.mu.Lock()
	if m.byKey == nil {
		m.byKey = map[seriesKey]series{}
	}
	m.byKey[k] = o
	m.mu.Unlock()
	return o
}

func (s *Server) metricsHandler(c *gin.Context) error {
	promhttp.HandlerFor(s.metrics.registry, promhttp.HandlerOpts{}).ServeHTTP(c.Writer, c.Request)
	return nil
}
