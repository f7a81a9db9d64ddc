// Package inferencetest is a fake OpenAI-compatible inference server for
// tests (of workflows and of the factoryd binary): a chat-completions
// endpoint with fixed answers and usage that keeps what it was asked. It is
// imported by tests only.
package inferencetest

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// Server answers every chat completion with Content and the usage
// PromptTokens / CompletionTokens, or fails it with Status when that is
// set. With Model set, only requests for that model get Content; the
// others get "hi". Set the fields before the server is used.
type Server struct {
	Content                        string
	Model                          string
	Status                         int
	PromptTokens, CompletionTokens int64

	mu       sync.Mutex
	requests []map[string]any
	auth     []string
	models   []string
}

// Start serves s on a local port until the test ends and returns its base
// URL (without /v1).
func (s *Server) Start(t testing.TB) string {
	t.Helper()
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return srv.URL
}

// ServeHTTP answers one chat completion.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body map[string]any
	_ = json.NewDecoder(r.Body).Decode(&body)
	model, _ := body["model"].(string)
	s.mu.Lock()
	s.requests = append(s.requests, body)
	s.auth = append(s.auth, r.Header.Get("Authorization"))
	s.models = append(s.models, model)
	s.mu.Unlock()
	if s.Status != 0 {
		http.Error(w, `{"error": {"message": "down"}}`, s.Status)
		return
	}
	content := s.Content
	if s.Model != "" && model != s.Model {
		content = "hi"
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id": "c1", "object": "chat.completion", "created": 1, "model": model,
		"choices": []any{map[string]any{"index": 0, "finish_reason": "stop", "message": map[string]any{"role": "assistant", "content": content}}},
		"usage": map[string]any{"prompt_tokens": s.PromptTokens, "completion_tokens": s.CompletionTokens,
			"total_tokens": s.PromptTokens + s.CompletionTokens},
	})
}

// Requests are the request bodies seen so far, in order.
func (s *Server) Requests() []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]map[string]any(nil), s.requests...)
}

// Auth are the Authorization headers seen so far, in order.
func (s *Server) Auth() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.auth...)
}

// Models are the models asked for so far, in order.
func (s *Server) Models() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.models...)
}
