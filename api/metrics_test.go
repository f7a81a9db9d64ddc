package api

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestMetricsMadeUpMethods: a client cannot grow the metrics (and their
// cache) by sending requests with methods of its own making.
func TestMetricsMadeUpMethods(t *testing.T) {
	srv := New(Config{}, nil)
	for i := 0; i < 50; i++ {
		srv.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(fmt.Sprintf("X%d", i), "/healthz", nil))
		srv.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(fmt.Sprintf("Y%d", i), "/no/such/path", nil))
	}
	srv.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("DELETE", "/no/such/path", nil))
	srv.metrics.mu.RLock()
	n := len(srv.metrics.byKey)
	srv.metrics.mu.RUnlock()
	assert.LessOrEqual(t, n, 3, "series after 100 made-up methods and one DELETE")

	w := httptest.NewRecorder()
	srv.ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	body := w.Body.String()
	assert.Contains(t, body, `linefactory_http_requests_total{method="other",`)
	assert.Contains(t, body, `linefactory_http_requests_total{method="DELETE",`)
	assert.False(t, strings.Contains(body, `method="X1"`), "a made-up method became a label")
}
