package main

import (
	"bytes"
	"context"
	"os"
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
	key, err := loadTokenKey("", filepath.Join(dir, tokenKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, tokenKeyFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token key file: %v %v, want mode 0600", fi, err)
	}
	if _, err := st.FindTokenByHash(context.Background(), api.HashToken(secret)); err == nil {
		t.Fatal("the token is stored under its unkeyed SHA-256")
	}
	tok, err := st.FindTokenByHash(context.Background(), key.Hash(secret))
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
	if _, err := st.FindTokenByHash(context.Background(), key.Hash(secret)); err == nil {
		t.Fatal("the replaced secret still works")
	}
	if tok, err := st.FindTokenByHash(context.Background(), key.Hash(strings.TrimSpace(out.String()))); err != nil || tok.Scope != "admin" {
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
	if code := tokenCommand([]string{"create", "--name", "evil\u202e", "--data-dir", dir}, &out, &errOut); code != 2 {
		t.Fatalf("a name with a bidirectional control character: exit %d, want 2", code)
	}
	ctx := context.Background()
	// The bootstrap token is seeded once and replaced when its secret changes.
	if err := seedBootstrapToken(ctx, st, key, "first"); err != nil {
		t.Fatal(err)
	}
	if err := seedBootstrapToken(ctx, st, key, "second"); err != nil {
		t.Fatal(err)
	}
	if _, err := api.FindToken(ctx, st, key, "first"); err == nil {
		t.Fatal("the old bootstrap secret still works")
	}
	if tok, err := api.FindToken(ctx, st, key, "second"); err != nil || tok.Scope != api.ScopeAdmin {
		t.Fatalf("bootstrap token: %+v %v", tok, err)
	}
	// A secret that is another token's is an error at start.
	if _, err := st.CreateToken(ctx, "ci2", api.ScopeRead, key.Hash("taken-secret")); err != nil {
		t.Fatal(err)
	}
	if err := seedBootstrapToken(ctx, st, key, "taken-secret"); err == nil || !strings.Contains(err.Error(), `token "ci2"`) {
		t.Fatalf("bootstrap secret colliding with token ci2: err = %v", err)
	}
	// Unset revokes the bootstrap token.
	if err := seedBootstrapToken(ctx, st, key, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := api.FindToken(ctx, st, key, "second"); err == nil {
		t.Fatal("the bootstrap token survived FACTORY_BOOTSTRAP_TOKEN being unset")
	}
	// A token stored unkeyed (before the key) still works once, and is
	// rehashed with the key on the way.
	if _, err := st.CreateToken(ctx, "old", api.ScopeRead, api.HashToken("legacy-secret")); err != nil {
		t.Fatal(err)
	}
	if tok, err := api.FindToken(ctx, st, key, "legacy-secret"); err != nil || tok.Name != "old" {
		t.Fatalf("legacy token: %+v %v", tok, err)
	}
	if _, err := st.FindTokenByHash(ctx, api.HashToken("legacy-secret")); err == nil {
		t.Fatal("the legacy token is still stored unkeyed after its use")
	}
	if tok, err := st.FindTokenByHash(ctx, key.Hash("legacy-secret")); err != nil || tok.Name != "old" {
		t.Fatalf("the legacy token after its use: %+v %v", tok, err)
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
