package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.temporal.io/sdk/client"
)

func TestTemporalAuthConfig(t *testing.T) {
	bad := []struct {
		env  map[string]string
		args []string
	}{
		// The embedded server has its own key.
		{map[string]string{"TEMPORAL_API_KEY": "k"}, nil},
		{nil, []string{"--temporal-api-key-file", "/k"}},
		{nil, []string{"--temporal-tls", "true"}},
		// Half a client certificate, both keys, a bad switch, TLS off with a CA.
		{nil, []string{"--temporal-address", "t:7233", "--temporal-tls-cert", "/c"}},
		{map[string]string{"TEMPORAL_API_KEY": "k"}, []string{"--temporal-address", "t:7233", "--temporal-api-key-file", "/k"}},
		{map[string]string{"TEMPORAL_TLS": "maybe"}, []string{"--temporal-address", "t:7233"}},
		{map[string]string{"TEMPORAL_TLS": "false", "TEMPORAL_TLS_SERVER_CA_CERT_PATH": "/ca"}, []string{"--temporal-address", "t:7233"}},
	}
	for _, tc := range bad {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			if _, err := loadConfig("serve", tc.args); err == nil {
				t.Fatalf("%v %v: no error", tc.env, tc.args)
			}
		})
	}
	t.Setenv("TEMPORAL_API_KEY", "secret-key")
	c, err := loadConfig("serve", []string{"--temporal-address", "temporal.example:7233"})
	if err != nil || c.TemporalAuth.APIKey != "secret-key" || c.TemporalAuth.TLS != "auto" {
		t.Fatalf("TEMPORAL_API_KEY: %+v %v", c.TemporalAuth, err)
	}
}

// TestTemporalAuthTLS: an API key goes over TLS unless the server is on
// loopback or TLS is turned off; a CA or client certificate means TLS.
func TestTemporalAuthTLS(t *testing.T) {
	cases := []struct {
		auth temporalAuth
		addr string
		tls  bool
	}{
		{temporalAuth{TLS: "auto"}, "temporal:7233", false},
		{temporalAuth{TLS: "auto", APIKey: "k"}, "temporal:7233", true},
		{temporalAuth{TLS: "auto", APIKey: "k"}, "127.0.0.1:7233", false},
		{temporalAuth{TLS: "auto", APIKeyFile: "/k"}, "localhost:7233", false},
		{temporalAuth{TLS: "auto", APIKeyFile: "/k"}, "[::1]:7233", false},
		{temporalAuth{TLS: "off", APIKey: "k"}, "temporal:7233", false},
		{temporalAuth{TLS: "on"}, "127.0.0.1:7233", true},
	}
	for _, tc := range cases {
		var opts client.Options
		if err := tc.auth.apply(&opts, tc.addr); err != nil {
			t.Fatal(err)
		}
		if got := opts.ConnectionOptions.TLS != nil; got != tc.tls || got == opts.ConnectionOptions.TLSDisabled {
			t.Errorf("%+v to %s: TLS %v (disabled %v), want %v", tc.auth, tc.addr, got, opts.ConnectionOptions.TLSDisabled, tc.tls)
		}
		if (tc.auth.APIKey != "" || tc.auth.APIKeyFile != "") != (opts.Credentials != nil) {
			t.Errorf("%+v: credentials %v", tc.auth, opts.Credentials)
		}
	}
	bad := temporalAuth{TLS: "auto", TLSCA: filepath.Join(t.TempDir(), "missing.pem")}
	if err := bad.apply(&client.Options{}, "temporal:7233"); err == nil {
		t.Fatal("a missing CA file: no error")
	}
}

// TestTemporalKeyFile: the key file is re-read once replaced (an embedded
// server writes a new key at every start); missing or empty, it is an error.
func TestTemporalKeyFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "api.key")
	kf := &keyFile{path: path}
	if _, err := kf.get(context.Background()); err == nil {
		t.Fatal("a missing key file: no error")
	}
	replace := func(content string) {
		tmp := filepath.Join(dir, "tmp")
		if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	replace("first-key-0000\n")
	if k, err := kf.get(context.Background()); err != nil || k != "first-key-0000" {
		t.Fatalf("key %q %v", k, err)
	}
	replace("second-key-111\n") // same size, maybe the same modification time
	if k, err := kf.get(context.Background()); err != nil || k != "second-key-111" {
		t.Fatalf("after a restart: key %q %v", k, err)
	}
	replace("\n")
	if _, err := kf.get(context.Background()); err == nil {
		t.Fatal("an empty key file: no error")
	}
}
