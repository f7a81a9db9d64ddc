package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

func TestLogFormat(t *testing.T) {
	for _, tc := range []struct {
		env, want string
	}{{"", `{"time":`}, {"json", `{"time":`}, {"text", "time="}} {
		t.Setenv("FACTORY_LOG_FORMAT", tc.env)
		c, err := loadConfig("serve", nil)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer // not a terminal: json unless asked for text
		newLogger(c, &b).Info("hello", slog.String("k", "v"))
		if !strings.HasPrefix(b.String(), tc.want) {
			t.Errorf("FACTORY_LOG_FORMAT=%q logs %q, want a %q line", tc.env, b.String(), tc.want)
		}
	}
	t.Setenv("FACTORY_LOG_FORMAT", "yaml")
	if _, err := loadConfig("serve", nil); err == nil || !strings.Contains(err.Error(), "--log-format") {
		t.Fatalf("a bad log format: %v", err)
	}
}

func TestBanner(t *testing.T) {
	c, err := loadConfig("serve", []string{"--data-dir", "/srv/factory"})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	printBanner(&b, c, "127.0.0.1:8080", "http://127.0.0.1:8233")
	for _, want := range []string{"API       http://127.0.0.1:8080", "Web UI    http://127.0.0.1:8233", "data dir  /srv/factory",
		"token create --name me --scope admin --force --data-dir /srv/factory", "deploy manifests/examples"} {
		if !strings.Contains(b.String(), want) {
			t.Fatalf("banner lacks %q:\n%s", want, b.String())
		}
	}
	c.BootstrapToken = "s"
	b.Reset()
	printBanner(&b, c, "127.0.0.1:8080", "")
	if strings.Contains(b.String(), "Web UI") || !strings.Contains(b.String(), "FACTORY_BOOTSTRAP_TOKEN") {
		t.Fatalf("banner with a bootstrap token and no UI:\n%s", b.String())
	}
}
