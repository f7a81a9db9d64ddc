package api

import (
	"context"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReadGateBounds(t *testing.T) {
	s := &Server{reads: make(chan struct{}, 2)}
	release := make(chan struct{})
	var inside, most, served atomic.Int32
	e := gin.New()
	e.GET("/r/:n", s.readGate, func(c *gin.Context) {
		n := inside.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		<-release
		inside.Add(-1)
		served.Add(1)
		c.Status(http.StatusOK)
	})
	var wg sync.WaitGroup
	codes := make([]int, 6)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := httptest.NewRecorder()
			e.ServeHTTP(w, httptest.NewRequest("GET", "/r/x", nil))
			codes[i] = w.Code
		}()
	}
	require.Eventually(t, func() bool { return inside.Load() == 2 }, 5*time.Second, time.Millisecond)

	// A waiting client that gives up leaves the queue without being served.
	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan struct{})
	gone := httptest.NewRecorder()
	go func() {
		defer close(gaveUp)
		e.ServeHTTP(gone, httptest.NewRequest("GET", "/r/y", nil).WithContext(ctx))
	}()
	cancel()
	select {
	case <-gaveUp:
	case <-time.After(5 * time.Second):
		t.Fatal("a cancelled waiting read did not return")
	}
	assert.Equal(t, statusClientClosed, gone.Code, "logged as the client's doing, not a server error")

	close(release)
	wg.Wait()
	assert.EqualValues(t, 2, most.Load(), "reads served at once")
	assert.EqualValues(t, 6, served.Load(), "the cancelled read must not be served")
	for i, c := range codes {
		assert.Equal(t, http.StatusOK, c, "read %d", i)
	}
}

// stalledClient is a connection whose client does not read: writing the
// body blocks until unstall is closed.
type stalledClient struct {
	*httptest.ResponseRecorder
	unstall chan struct{}
	writing chan struct{}
}

func (w *stalledClient) Write(p []byte) (int, error) {
	close(w.writing)
	<-w.unstall
	return w.ResponseRecorder.Write(p)
}

// TestReadGateSlowClient: a client that does not read its response holds no
// slot; it gets the whole response once it reads.
func TestReadGateSlowClient(t *testing.T) {
	s := &Server{reads: make(chan struct{}, 1)}
	e := gin.New()
	e.GET("/r", s.readGate, func(c *gin.Context) {
		c.Header("X-Read", "yes")
		c.JSON(http.StatusCreated, gin.H{"ok": true})
	})
	slow := &stalledClient{ResponseRecorder: httptest.NewRecorder(), unstall: make(chan struct{}), writing: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.ServeHTTP(slow, httptest.NewRequest("GET", "/r", nil))
	}()
	select {
	case <-slow.writing:
	case <-time.After(5 * time.Second):
		t.Fatal("the slow client's response was never written")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	w := httptest.NewRecorder()
	e.ServeHTTP(w, httptest.NewRequest("GET", "/r", nil).WithContext(ctx))
	require.NoError(t, ctx.Err(), "a read waited for a client that does not read")
	assert.Equal(t, http.StatusCreated, w.Code)
	assert.JSONEq(t, `{"ok":true}`, w.Body.String())
	close(slow.unstall)
	<-done
	assert.Equal(t, http.StatusCreated, slow.Code)
	assert.Equal(t, "yes", slow.Header().Get("X-Read"))
	assert.JSONEq(t, `{"ok":true}`, slow.Body.String())
}

func TestReadGateConfig(t *testing.T) {
	assert.Equal(t, 4*runtime.GOMAXPROCS(0), cap(New(Config{}, nil).reads), "default: 4 per CPU")
	assert.Equal(t, 7, cap(New(Config{MaxConcurrentReads: 7}, nil).reads))
	assert.Nil(t, New(Config{MaxConcurrentReads: -1}, nil).reads, "negative: unbounded")
}

// TestReadGateRoutes: only authenticated GETs that answer at once are
// gated; a followed log (which lasts as long as its run) and the public
// and gateway routes are not.
func TestReadGateRoutes(t *testing.T) {
	h := newHarness(t, storetestSQLite(t))
	h.srv.reads = make(chan struct{}, 1)
	h.srv.reads <- struct{}{} // the one slot taken: a gated route waits
	get := func(path string, wait time.Duration) (int, error) {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		r := httptest.NewRequest("GET", path, nil).WithContext(ctx)
		r.Header.Set("Authorization", "Bearer "+h.tokens[ScopeRead])
		w := httptest.NewRecorder()
		h.srv.ServeHTTP(w, r)
		return w.Code, ctx.Err()
	}
	for _, path := range []string{"/healthz", "/job-runs/jr_missing/logs"} {
		code, err := get(path, 5*time.Second)
		assert.NoError(t, err, "%s waited for the gate", path)
		assert.Less(t, code, 500, path)
	}
	_, err := get("/job-runs/jr_missing", 100*time.Millisecond)
	assert.Error(t, err, "GET /job-runs/{id} should have waited for the gate")
	<-h.srv.reads
	code, err := get("/job-runs/jr_missing", 5*time.Second)
	assert.NoError(t, err)
	assert.Equal(t, http.StatusNotFound, code, "served once the slot is free")
	code, _ = get("/job-runs/jr_missing/logs", 5*time.Second)
	assert.Equal(t, http.StatusNotFound, code)
}

// TestHeldResponseKeepsDoc: a held response keeps a stored document
// without copying it and sends it whole; a write after it appends to a
// copy, leaving the shared document as it was.
func TestHeldResponseKeepsDoc(t *testing.T) {
	gin.SetMode(gin.TestMode)
	doc := make([]byte, 0, 64)
	doc = append(doc, `{"id":"r"}`...)
	rec := httptest.NewRecorder()
	c, _ := gin.CreateTestContext(rec)
	held := &heldResponse{ResponseWriter: c.Writer}
	c.Writer = held
	writeJSONDoc(c, doc)
	if &held.body[0] != &doc[0] {
		t.Fatal("the document was copied")
	}
	_, _ = held.Write([]byte(`!`))
	if string(doc) != `{"id":"r"}` || string(doc[:cap(doc)][len(doc):len(doc)+1]) == "!" {
		t.Fatalf("the shared document changed: %q", doc[:cap(doc)])
	}
	held.send()
	if rec.Code != 200 || rec.Body.String() != `{"id":"r"}!` || rec.Header().Get("Content-Type") != "application/json; charset=utf-8" {
		t.Fatalf("sent %d %q %v", rec.Code, rec.Body.String(), rec.Header())
	}
}
