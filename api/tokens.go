package api

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"

	"github.com/linefactory/linefactory/store"
)

// TokenKey is the server key token secrets are hashed with (HMAC-SHA-256),
// so a leaked tokens table cannot be brute-forced offline. Every process
// sharing a store must use the same key. An empty key hashes with plain
// SHA-256 (tests and stores made before keys).
type TokenKey []byte

// Hash is the hex digest under which a token secret is stored.
func (k TokenKey) Hash(secret string) string {
	if len(k) == 0 {
		return HashToken(secret)
	}
	mac := hmac.New(sha256.New, k)
	mac.Write([]byte(secret))
	return hex.EncodeToString(mac.Sum(nil))
}

// TokenStore is what finding a token by its secret needs of the store.
type TokenStore interface {
	FindTokenByHash(ctx context.Context, hash string) (store.Token, error)
	RehashToken(ctx context.Context, id, oldHash, newHash string) error
}

// FindToken returns the token whose secret is secret. A token stored under
// the unkeyed SHA-256 of its secret (made before the store had a key) is
// found too and rehashed with the key on the way: the table migrates as
// its tokens are used.
func FindToken(ctx context.Context, st TokenStore, key TokenKey, secret string) (store.Token, error) {
	hash := key.Hash(secret)
	tok, err := st.FindTokenByHash(ctx, hash)
	if err == nil || !errors.Is(err, store.ErrNotFound) || len(key) == 0 {
		return tok, checkHash(tok, hash, err)
	}
	legacy := HashToken(secret)
	tok, err = st.FindTokenByHash(ctx, legacy)
	if err != nil {
		return tok, err
	}
	if err := checkHash(tok, legacy, nil); err != nil {
		return tok, err
	}
	if err := st.RehashToken(ctx, tok.ID, legacy, hash); err != nil {
		return tok, fmt.Errorf("rehash token %q with the server key: %w", tok.Name, err)
	}
	tok.Hash = hash
	return tok, nil
}

func checkHash(tok store.Token, hash string, err error) error {
	if err == nil && subtle.ConstantTimeCompare([]byte(tok.Hash), []byte(hash)) != 1 {
		return fmt.Errorf("token: %w", store.ErrNotFound)
	}
	return err
}

// tokenNameRE: token names are printable identifiers, so that no name can
// hide control or bidirectional characters in a listing or a log.
var tokenNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// ValidTokenName reports whether name is a valid token name: letters,
// digits, '.', '_' and '-', starting with a letter or digit, at most 128
// characters.
func ValidTokenName(name string) bool {
	return len(name) <= maxTokenNameLen && tokenNameRE.MatchString(name)
}
