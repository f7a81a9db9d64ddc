package store

import "gorm.io/gorm"

// DBForTest exposes the connection to the store's external tests.
func DBForTest(s *Store) *gorm.DB { return s.db }
