// Package store persists Linefactory's definitions and records with GORM on
// SQLite (the embedded default) or PostgreSQL, chosen by the DSN in Open.
//
// Invariants:
//   - Version numbers start at 1 per name and grow by 1 with no gaps or
//     duplicates, even under concurrent deploys: the definition row is locked
//     (PostgreSQL), a unique index on (name, version_number) backs it, and a
//     conflict is retried. A deploy whose hash equals the latest version's
//     stores nothing and returns that version.
//   - Only the SHA-256 of a token is stored.
//   - Run records are whole JSON documents changed by read-modify-write in
//     one transaction (UpdateJobRun, UpdateLineRun), so concurrent writers
//     never lose each other's changes.
//   - GORM errors never leave the package untranslated: callers see
//     ErrNotFound and ErrConflict (wrapped) or an internal error.
//   - GORM models are unexported; callers get plain domain structs.
package store
