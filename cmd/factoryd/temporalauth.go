package main

// How factoryd's Temporal client proves who it is. To the embedded server it
// presents that server's key of this start (never configured, never in the
// environment). To an external server (TEMPORAL_ADDRESS) it presents what
// the operator configured: an API key (TEMPORAL_API_KEY, or a file re-read
// when it changes, such as another factoryd's <data-dir>/temporal/api.key),
// and/or a TLS client certificate (mTLS).

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"

	"go.temporal.io/sdk/client"

	"github.com/linefactory/linefactory/cmd/internal/embedded"
)

// temporalAuth holds the external Temporal's client credentials (see
// config's doc comment).
type temporalAuth struct {
	// APIKey is TEMPORAL_API_KEY (a secret: read once, then removed from
	// the environment).
	APIKey string
	// APIKeyFile names a file holding the API key.
	APIKeyFile string
	// TLS is auto, on or off.
	TLS                           string
	TLSCA, TLSCert, TLSKey, TLSSN string
}

// The variables are those of Temporal's own clients (its CLI and SDKs'
// environment configuration), so one environment serves both.
func (a *temporalAuth) flags(fs *flag.FlagSet) {
	fs.StringVar(&a.APIKeyFile, "temporal-api-key-file", env("FACTORY_TEMPORAL_API_KEY_FILE", ""),
		"file holding the API key sent to TEMPORAL_ADDRESS, re-read when it changes (FACTORY_TEMPORAL_API_KEY_FILE)")
	fs.StringVar(&a.TLS, "temporal-tls", env("TEMPORAL_TLS", "auto"), "TLS to TEMPORAL_ADDRESS: auto, true, false (TEMPORAL_TLS)")
	fs.StringVar(&a.TLSCA, "temporal-tls-ca", env("TEMPORAL_TLS_SERVER_CA_CERT_PATH", ""),
		"PEM file of the CAs TEMPORAL_ADDRESS's certificate is checked against (TEMPORAL_TLS_SERVER_CA_CERT_PATH; default the system's)")
	fs.StringVar(&a.TLSCert, "temporal-tls-cert", env("TEMPORAL_TLS_CLIENT_CERT_PATH", ""), "PEM client certificate for mTLS to TEMPORAL_ADDRESS (TEMPORAL_TLS_CLIENT_CERT_PATH)")
	fs.StringVar(&a.TLSKey, "temporal-tls-key", env("TEMPORAL_TLS_CLIENT_KEY_PATH", ""), "PEM private key of --temporal-tls-cert (TEMPORAL_TLS_CLIENT_KEY_PATH)")
	fs.StringVar(&a.TLSSN, "temporal-tls-server-name", env("TEMPORAL_TLS_SERVER_NAME", ""), "name TEMPORAL_ADDRESS's certificate must carry (TEMPORAL_TLS_SERVER_NAME; default its host)")
}

// parse reads TEMPORAL_API_KEY and checks the settings: they are for an
// external server only.
func (a *temporalAuth) parse(external bool) error {
	a.APIKey = os.Getenv("TEMPORAL_API_KEY")
	switch strings.ToLower(a.TLS) {
	case "auto", "":
		a.TLS = "auto"
	case "true", "on", "1":
		a.TLS = "on"
	case "false", "off", "0":
		a.TLS = "off"
	default:
		return fmt.Errorf("--temporal-tls (TEMPORAL_TLS): %q is not auto, true or false", a.TLS)
	}
	if (a.TLSCert == "") != (a.TLSKey == "") {
		return fmt.Errorf("--temporal-tls-cert and --temporal-tls-key (TEMPORAL_TLS_CLIENT_CERT_PATH, TEMPORAL_TLS_CLIENT_KEY_PATH) go together")
	}
	if a.APIKey != "" && a.APIKeyFile != "" {
		return fmt.Errorf("TEMPORAL_API_KEY and --temporal-api-key-file (FACTORY_TEMPORAL_API_KEY_FILE): set one")
	}
	if a.TLS == "off" && (a.TLSCA != "" || a.TLSCert != "") {
		return fmt.Errorf("TLS to Temporal is off (TEMPORAL_TLS=false) but a TLS certificate or CA is given")
	}
	if !external && (a.APIKey != "" || a.APIKeyFile != "" || a.TLS != "auto" || a.TLSCA != "" || a.TLSCert != "" || a.TLSSN != "") {
		return fmt.Errorf("TEMPORAL_API_KEY, FACTORY_TEMPORAL_API_KEY_FILE and TEMPORAL_TLS* are for an external Temporal (TEMPORAL_ADDRESS); the embedded server admits factoryd with a key of its own")
	}
	return nil
}

// embeddedCredentials makes opts present the embedded server's key, over
// plain gRPC (loopback).
func embeddedCredentials(opts *client.Options, srv *embedded.Server) {
	opts.Credentials = client.NewAPIKeyStaticCredentials(srv.APIKey())
	opts.ConnectionOptions.TLSDisabled = true
}

// apply sets opts' credentials and TLS for the external server at addr.
// TLS "auto" is on when a CA or client certificate is given, or an API key
// goes to a host that is not loopback (a key must not cross a network in
// clear); otherwise off.
func (a *temporalAuth) apply(opts *client.Options, addr string) error {
	key := a.APIKey != "" || a.APIKeyFile != ""
	useTLS := a.TLS == "on" || a.TLS == "auto" && (a.TLSCA != "" || a.TLSCert != "" || key && !loopbackHost(addr))
	if a.APIKey != "" {
		opts.Credentials = client.NewAPIKeyStaticCredentials(a.APIKey)
	}
	if a.APIKeyFile != "" {
		// A missing file fails the call, which dialTemporal retries: the
		// factoryd that writes it may not have started yet.
		opts.Credentials = client.NewAPIKeyDynamicCredentials((&keyFile{path: a.APIKeyFile}).get)
	}
	if !useTLS {
		opts.ConnectionOptions.TLSDisabled = true
		return nil
	}
	cfg := &tls.Config{ServerName: a.TLSSN, MinVersion: tls.VersionTLS12}
	if a.TLSCA != "" {
		pem, err := os.ReadFile(a.TLSCA)
		if err != nil {
			return fmt.Errorf("--temporal-tls-ca: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return fmt.Errorf("--temporal-tls-ca: %s holds no PEM certificate", a.TLSCA)
		}
	}
	if a.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(a.TLSCert, a.TLSKey)
		if err != nil {
			return fmt.Errorf("--temporal-tls-cert/--temporal-tls-key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	opts.ConnectionOptions.TLS = cfg
	return nil
}

// loopbackHost tells whether addr's host is a loopback address or
// localhost.
func loopbackHost(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// keyFile is an API key kept in a file, re-read when the file is replaced
// or changed (an embedded server writes a new key at every start).
type keyFile struct {
	path string
	mu   sync.Mutex
	seen os.FileInfo
	key  string
}

func (k *keyFile) get(context.Context) (string, error) {
	st, err := os.Stat(k.path)
	if err != nil {
		return "", fmt.Errorf("temporal API key file: %w", err)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.seen != nil && os.SameFile(k.seen, st) && k.seen.ModTime().Equal(st.ModTime()) && k.seen.Size() == st.Size() {
		return k.key, nil
	}
	data, err := os.ReadFile(k.path)
	if err != nil {
		return "", fmt.Errorf("temporal API key file: %w", err)
	}
	key := strings.TrimSpace(string(data))
	if key == "" {
		return "", errors.New("temporal API key file " + k.path + " is empty")
	}
	k.seen, k.key = st, key
	return key, nil
}
