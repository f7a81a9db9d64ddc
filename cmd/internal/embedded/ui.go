package embedded

import (
	"context"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	uiapi "github.com/temporalio/ui-server/v2/server/api"
	uiconfig "github.com/temporalio/ui-server/v2/server/config"
	"github.com/temporalio/ui-server/v2/server/cors"
	"github.com/temporalio/ui-server/v2/server/csrf"
	"github.com/temporalio/ui-server/v2/server/headers"
	"github.com/temporalio/ui-server/v2/server/route"
	"github.com/temporalio/ui-server/v2/ui"
	"google.golang.org/grpc/metadata"
)

type uiConfig struct{ cfg *uiconfig.Config }

func (p uiConfig) GetConfig() (*uiconfig.Config, error) { return p.cfg, nil }

// startUI serves the Web UI on addr (port 0: a free one). It reads through
// the frontend with the UI's key, which gives it the reader role, and shows
// no write actions: the UI has no login, so whatever reaches its address may
// look at workflows but not terminate, signal or reset them.
func (s *Server) startUI(addr, namespace, uiKey string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("temporal UI: %w", err)
	}
	tcp := l.Addr().(*net.TCPAddr)
	cfg := &uiconfig.Config{
		TemporalGRPCAddress: s.frontend,
		Host:                tcp.IP.String(),
		Port:                tcp.Port,
		EnableUI:            true,
		DefaultNamespace:    namespace,
		DisableNewsFetch:    true,
		DisableWriteActions: true,
		HideLogs:            true,
		CORS:                uiconfig.CORS{CookieInsecure: true},
	}
	h, err := uiHandler(cfg, uiKey)
	if err != nil {
		l.Close()
		return fmt.Errorf("temporal UI: %w", err)
	}
	s.ui = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.ui.Serve(l) }()
	s.uiURL = "http://" + l.Addr().String()
	return nil
}

// uiHandler is the UI server's handler as ui-server's NewServer builds it
// (its routes and middleware), with every call to the frontend carrying
// the UI's key. Callers' own Authorization headers are dropped: the UI has
// no login of its own to pass on.
func uiHandler(cfg *uiconfig.Config, uiKey string) (http.Handler, error) {
	provider, err := uiconfig.NewConfigProviderWithRefresh(uiConfig{cfg})
	if err != nil {
		return nil, err
	}
	bearer := "Bearer " + uiKey
	withKey := func(echo.Context) runtime.ServeMuxOption {
		return runtime.WithMetadata(func(context.Context, *http.Request) metadata.MD {
			return metadata.Pairs("authorization", bearer)
		})
	}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.Use(middleware.Recover(), middleware.Gzip())
	e.Use(cors.CORSMiddleware(cors.CORSConfig{
		AllowHeaders:     []string{echo.HeaderOrigin, echo.HeaderContentType, echo.HeaderAccept, echo.HeaderXCSRFToken, "Caller-Type"},
		AllowCredentials: true, ConfigProvider: provider,
	}))
	e.Use(middleware.Secure())
	e.Use(csrf.EnsureTokenCookie(false))
	e.Use(middleware.CSRFWithConfig(csrf.MiddlewareConfig(provider, false)))
	e.Pre(route.PublicPath(cfg.PublicPath))
	route.SetHealthRoute(e)
	if err := route.SetAPIRoutes(e, provider, []uiapi.Middleware{headers.WithForwardHeaders([]string{"Caller-Type"}), withKey}); err != nil {
		return nil, err
	}
	assets, err := ui.Assets()
	if err == nil {
		assets, err = fs.Sub(assets, "local")
	}
	if err != nil {
		return nil, err
	}
	if err := route.SetUIRoutes(e, cfg.PublicPath, assets, provider); err != nil {
		return nil, err
	}
	route.SetRenderRoute(e, "/")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Del("Authorization")
		r.Header.Del("Authorization-Extras")
		// The raw history download calls the frontend with the request's
		// context rather than through the API mux: the key rides there too.
		r = r.WithContext(metadata.AppendToOutgoingContext(r.Context(), "authorization", bearer))
		e.ServeHTTP(w, r)
	}), nil
}
