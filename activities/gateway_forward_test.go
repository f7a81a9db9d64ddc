package activities

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// TestGatewayServiceProxiesOnlyTheGateway: the proxy an isolated step
// reaches passes the gateway's paths with the step's token and refuses the
// rest of the API; the step's base URLs point at its own loopback.
func TestGatewayServiceProxiesOnlyTheGateway(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.URL.Path+" "+r.Header.Get("Authorization"))
		mu.Unlock()
		_, _ = io.WriteString(w, "api:"+r.URL.Path)
	}))
	defer api.Close()
	env := map[string]string{EnvInferenceBaseURL: api.URL + "/inference/v1", EnvOpenAIBaseURL: api.URL + "/inference/v1",
		EnvInferenceToken: "lfi_x", EnvOpenAIAPIKey: "lfi_x"}
	svc, err := gatewayService(env)
	if err != nil {
		t.Fatal(err)
	}
	want := "http://127.0.0.1:8931/inference/v1"
	if env[EnvInferenceBaseURL] != want || env[EnvOpenAIBaseURL] != want || env[EnvInferenceToken] != "lfi_x" {
		t.Fatalf("env %v", env)
	}
	if svc.Port != InferenceSandboxPort || svc.Name != "inference" {
		t.Fatalf("service %+v", svc)
	}
	for _, c := range []struct {
		path string
		code int
	}{
		{"/inference/v1/chat/completions", 200},
		{"/inference/v1/models", 200},
		{"/v1/jobs", 404},
		{"/inference/v1/../../v1/jobs", 404},
		{"/inference/v10", 404},
	} {
		req := httptest.NewRequest("GET", "http://127.0.0.1:8931"+c.path, nil)
		req.Header.Set("Authorization", "Bearer lfi_x")
		rec := httptest.NewRecorder()
		svc.Handler.ServeHTTP(rec, req)
		if rec.Code != c.code {
			t.Errorf("%s: %d %s, want %d", c.path, rec.Code, rec.Body.String(), c.code)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 || seen[0] != "/inference/v1/chat/completions Bearer lfi_x" || !strings.HasPrefix(seen[1], "/inference/v1/models") {
		t.Fatalf("the API saw %q", seen)
	}
	if _, err := gatewayService(map[string]string{EnvInferenceBaseURL: "unix:/x"}); err == nil {
		t.Fatal("a non-http gateway URL was accepted")
	}
}
