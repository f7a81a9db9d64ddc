package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/linefactory/linefactory/api"
	"github.com/linefactory/linefactory/store"
)

// tokenKeyFile is the key file's name in the data dir.
const tokenKeyFile = "token.key"

// minTokenKeyLen is the shortest key accepted (32 bytes of hex = 128 bits).
const minTokenKeyLen = 32

// loadTokenKey returns the key token secrets are hashed with: key
// (FACTORY_TOKEN_KEY) when set, else the content of the file at path
// (FACTORY_TOKEN_KEY_FILE, default <data-dir>/token.key), which is created
// with a random key (mode 0600) when missing. Processes sharing a store
// (PostgreSQL with several API processes) must share the key: set
// FACTORY_TOKEN_KEY, or point FACTORY_TOKEN_KEY_FILE at one file, on all of
// them.
func loadTokenKey(key, path string) (api.TokenKey, error) {
	if key != "" {
		if len(key) < minTokenKeyLen {
			return nil, fmt.Errorf("FACTORY_TOKEN_KEY must be at least %d characters", minTokenKeyLen)
		}
		return api.TokenKey(key), nil
	}
	if data, err := os.ReadFile(path); err == nil {
		k := strings.TrimSpace(string(data))
		if len(k) < minTokenKeyLen {
			return nil, fmt.Errorf("token key file %s: the key must be at least %d characters", path, minTokenKeyLen)
		}
		return api.TokenKey(k), nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("token key file: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("token key file: %w", err)
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	newKey := hex.EncodeToString(b[:])
	// O_EXCL: of processes starting together on one data dir, one writes
	// the key and the others read it.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return loadTokenKey("", path)
	}
	if err != nil {
		return nil, fmt.Errorf("token key file: %w", err)
	}
	if _, err := f.WriteString(newKey + "\n"); err != nil {
		f.Close()
		return nil, fmt.Errorf("token key file: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("token key file: %w", err)
	}
	return api.TokenKey(newKey), nil
}

// tokenKeyPath is the key file's path: FACTORY_TOKEN_KEY_FILE, or token.key
// in the data dir.
func tokenKeyPath(dataDir string) string {
	return env("FACTORY_TOKEN_KEY_FILE", filepath.Join(dataDir, tokenKeyFile))
}

// bootstrapTokenName is the name of the token FACTORY_BOOTSTRAP_TOKEN seeds.
const bootstrapTokenName = "bootstrap"

// seedBootstrapToken makes the store's "bootstrap" token match
// FACTORY_BOOTSTRAP_TOKEN: unset revokes it; a new secret replaces the old;
// a secret that is another token's is an error (it would silently keep that
// token's name and scope).
func seedBootstrapToken(ctx context.Context, st *store.Store, key api.TokenKey, secret string) error {
	_, err := st.GetTokenByName(ctx, bootstrapTokenName)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	exists := err == nil
	if secret == "" {
		if exists {
			return st.DeleteToken(ctx, bootstrapTokenName)
		}
		return nil
	}
	tok, err := api.FindToken(ctx, st, key, secret)
	switch {
	case err == nil && tok.Name == bootstrapTokenName:
		return nil
	case err == nil:
		return fmt.Errorf("FACTORY_BOOTSTRAP_TOKEN is the secret of token %q: choose another secret or unset it", tok.Name)
	case !errors.Is(err, store.ErrNotFound):
		return err
	}
	if exists {
		if err := st.DeleteToken(ctx, bootstrapTokenName); err != nil {
			return err
		}
	}
	_, err = st.CreateToken(ctx, bootstrapTokenName, api.ScopeAdmin, key.Hash(secret))
	return err
}
