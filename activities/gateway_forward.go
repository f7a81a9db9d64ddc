package activities

import (
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path"
	"strconv"
	"strings"

	"github.com/linefactory/linefactory/activities/sandbox"
)

// InferenceSandboxPort is where an isolated svc_inference step reaches the
// gateway: 127.0.0.1 of its own network namespace (gatewayService).
const InferenceSandboxPort = 8931

// gatewayService makes the gateway reachable from an isolated step, which
// reaches nothing of the host: the worker serves a reverse proxy to the
// gateway's URL (FACTORY_INFERENCE_GATEWAY_URL or the API's address) on a
// socket of the step's own, the driver forwards the step's
// 127.0.0.1:InferenceSandboxPort to it, and env's base URLs are rewritten
// to that address. Only the gateway's paths pass (the rest of the API
// answers 404); the token is unchanged and the gateway still checks it.
func gatewayService(env map[string]string) (sandbox.Service, error) {
	target, err := url.Parse(env[EnvInferenceBaseURL])
	if err != nil || target.Host == "" || (target.Scheme != "http" && target.Scheme != "https") {
		return sandbox.Service{}, fmt.Errorf("the inference gateway URL %q is not an http(s) URL", env[EnvInferenceBaseURL])
	}
	prefix := strings.TrimSuffix(target.Path, "/")
	upstream := &url.URL{Scheme: target.Scheme, Host: target.Host}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(upstream)
			r.Out.Host = upstream.Host
		},
		FlushInterval: -1, // streamed completions pass as they come
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := path.Clean("/" + r.URL.Path)
		if p != prefix && !strings.HasPrefix(p, prefix+"/") {
			http.Error(w, "only the inference gateway is reachable here", http.StatusNotFound)
			return
		}
		r.URL.Path, r.URL.RawPath = p, ""
		proxy.ServeHTTP(w, r)
	})
	inside := "http://127.0.0.1:" + strconv.Itoa(InferenceSandboxPort) + prefix
	env[EnvInferenceBaseURL] = inside
	env[EnvOpenAIBaseURL] = inside
	return sandbox.Service{Name: "inference", Port: InferenceSandboxPort, Handler: handler}, nil
}
