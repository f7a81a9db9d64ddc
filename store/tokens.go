package store

import (
	"context"
	"crypto/subtle"
	"fmt"
	"time"
)

// Token is an API token; only the SHA-256 (hex) of its secret is stored.
type Token struct {
	ID         string
	Name       string
	Scope      string
	Hash       string
	CreatedAt  time.Time
	LastUsedAt *time.Time
}

type tokenModel struct {
	ID         string `gorm:"primaryKey;size:64"`
	Name       string `gorm:"uniqueIndex;size:128;not null"`
	Scope      string `gorm:"size:16;not null"`
	Hash       string `gorm:"uniqueIndex;size:64;not null"`
	CreatedAt  time.Time
	LastUsedAt *time.Time
}

func (tokenModel) TableName() string { return "tokens" }

func (m tokenModel) domain() Token {
	return Token{ID: m.ID, Name: m.Name, Scope: m.Scope, Hash: m.Hash, CreatedAt: m.CreatedAt.UTC(), LastUsedAt: utcPtr(m.LastUsedAt)}
}

// CreateToken stores a token by the hex SHA-256 of its secret; ErrConflict if
// the name is taken.
func (s *Store) CreateToken(ctx context.Context, name, scope, hash string) (Token, error) {
	m := tokenModel{ID: NewID("tok_"), Name: name, Scope: scope, Hash: hash, CreatedAt: s.now()}
	if err := s.db.WithContext(ctx).Create(&m).Error; err != nil {
		return Token{}, translate(err, fmt.Sprintf("create token %q", name))
	}
	return m.domain(), nil
}

// FindTokenByHash returns the token whose secret hashes to hash. The stored
// hash is compared again in constant time.
func (s *Store) FindTokenByHash(ctx context.Context, hash string) (Token, error) {
	var m tokenModel
	if err := s.db.WithContext(ctx).Where("hash = ?", hash).Take(&m).Error; err != nil {
		return Token{}, translate(err, "token")
	}
	if subtle.ConstantTimeCompare([]byte(m.Hash), []byte(hash)) != 1 {
		return Token{}, fmt.Errorf("token: %w", ErrNotFound)
	}
	return m.domain(), nil
}

// TokenTouchInterval is how often at most a token's LastUsedAt is written, so
// authenticating a request does not cost a write every time.
const TokenTouchInterval = time.Minute

// TouchToken records that a token was used at the given time, unless its use
// was recorded less than TokenTouchInterval before (concurrent requests
// write once).
func (s *Store) TouchToken(ctx context.Context, id string, at time.Time) error {
	at = at.UTC()
	err := s.db.WithContext(ctx).Model(&tokenModel{}).
		Where("id = ? AND (last_used_at IS NULL OR last_used_at <= ?)", id, at.Add(-TokenTouchInterval)).
		Update("last_used_at", at).Error
	return translate(err, "touch token")
}

// GetTokenByName returns a token by name.
func (s *Store) GetTokenByName(ctx context.Context, name string) (Token, error) {
	var m tokenModel
	if err := s.db.WithContext(ctx).Where("name = ?", name).Take(&m).Error; err != nil {
		return Token{}, translate(err, fmt.Sprintf("token %q", name))
	}
	return m.domain(), nil
}

// ListTokens lists tokens by name.
func (s *Store) ListTokens(ctx context.Context) ([]Token, error) {
	var rows []tokenModel
	if err := s.db.WithContext(ctx).Order(s.byteOrder("name")).Find(&rows).Error; err != nil {
		return nil, translate(err, "list tokens")
	}
	out := make([]Token, len(rows))
	for i, r := range rows {
		out[i] = r.domain()
	}
	return out, nil
}

// DeleteToken removes a token by name.
func (s *Store) DeleteToken(ctx context.Context, name string) error {
	res := s.db.WithContext(ctx).Where("name = ?", name).Delete(&tokenModel{})
	if res.Error != nil {
		return translate(res.Error, "delete token")
	}
	if res.RowsAffected == 0 {
		return fmt.Errorf("token %q: %w", name, ErrNotFound)
	}
	return nil
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}
