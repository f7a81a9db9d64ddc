package store

import (
	"context"
	"fmt"
)

// RehashToken replaces a token's stored hash, provided it is still oldHash
// (a concurrent rehash of the same token is harmless): tokens stored under
// an unkeyed hash move to the keyed one when first used.
func (s *Store) RehashToken(ctx context.Context, id, oldHash, newHash string) error {
	res := s.db.WithContext(ctx).Model(&tokenModel{}).Where("id = ? AND hash = ?", id, oldHash).Update("hash", newHash)
	if res.Error != nil {
		return translate(res.Error, fmt.Sprintf("rehash token %s", id))
	}
	return nil
}
