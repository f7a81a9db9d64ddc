package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linefactory/linefactory/api"
	"github.com/linefactory/linefactory/cmd/internal/embedded"
	"github.com/linefactory/linefactory/store"
)

func TestTokenCreate(t *testing.T) {
	dir := t.TempDir()
	var out, errOut bytes.Buffer
	if code := tokenCommand([]string{"create", "--name", "ci", "--scope", "read", "--data-dir", dir}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	secret := strings.TrimSpace(out.String())
	st, err := store.Open(context.Background(), filepath.Join(dir, "factory.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	tok, err := st.FindTokenByHash(context.Background(), api.HashToken(secret))
	if err != nil || tok.Name != "ci" || tok.Scope != "read" {
		t.Fatalf("stored token: %+v %v", tok, err)
	}
	if code := tokenCommand([]string{"create", "--name", "ci", "--data-dir", dir}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "exists already") {
		t.Fatalf("duplicate name: exit %d %s", code, errOut.String())
	}
	if code := tokenCommand([]string{"create", "--name", "x", "--scope", "root", "--data-dir", dir}, &out, &errOut); code != 2 {
		t.Fatalf("bad scope: exit %d", code)
	}
	// --force replaces the token: the old secret stops working.
	out.Reset()
	if code := tokenCommand([]string{"create", "--name", "ci", "--scope", "admin", "--force", "--data-dir", dir}, &out, &errOut); code != 0 {
		t.Fatalf("create --force: exit %d %s", code, errOut.String())
	}
	if _, err := st.FindTokenByHash(context.Background(), api.HashToken(secret)); err == nil {
		t.Fatal("the replaced secret still works")
	}
	if tok, err := st.FindTokenByHash(context.Background(), api.HashToken(strings.TrimSpace(out.String()))); err != nil || tok.Scope != "admin" {
		t.Fatalf("forced token: %+v %v", tok, err)
	}
	out.Reset()
	if code := tokenCommand([]string{"list", "--data-dir", dir}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "ci    admin") {
		t.Fatalf("token list: exit %d\n%s", code, out.String())
	}
	if code := tokenCommand([]string{"revoke", "ci", "--data-dir", dir}, &out, &errOut); code != 0 {
		t.Fatalf("revoke: exit %d %s", code, errOut.String())
	}
	errOut.Reset()
	if code := tokenCommand([]string{"revoke", "ci", "--data-dir", dir}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "no token named") {
		t.Fatalf("revoke twice: exit %d %s", code, errOut.String())
	}
	// The bootstrap token is seeded once and replaced when its secret changes.
	if err := seedBootstrapToken(context.Background(), st, "first"); err != nil {
		t.Fatal(err)
	}
	if err := seedBootstrapToken(context.Background(), st, "second"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.FindTokenByHash(context.Background(), api.HashToken("first")); err == nil {
		t.Fatal("the old bootstrap secret still works")
	}
	if tok, err := st.FindTokenByHash(context.Background(), api.HashToken("second")); err != nil || tok.Scope != api.ScopeAdmin {
		t.Fatalf("bootstrap token: %+v %v", tok, err)
	}
}

func TestEmbeddedDataDirLock(t *testing.T) {
	dir := t.TempDir()
	srv, err := embedded.Start(context.Background(), embedded.Config{DataDir: dir, UIAddr: "off"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	if _, err := embedded.Start(context.Background(), embedded.Config{DataDir: dir, UIAddr: "off"}); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second server on one data dir: err = %v, want a clear 'in use' error", err)
	}
}
