package store_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/linefactory/linefactory/store"
	"github.com/linefactory/linefactory/store/storetest"
)

// TestListsInByteOrder: jobs, lines and knowledge items list in byte order
// on both stores. On PostgreSQL the name columns are given a linguistic
// collation first (as a database created with an en_US locale has), under
// which "a_b" < "a-b" < "ab" < "aB".
func TestListsInByteOrder(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, s *store.Store) {
		if s.IsPostgres() {
			db := store.DBForTest(s)
			var n int64
			db.Raw(`SELECT count(*) FROM pg_collation WHERE collname = 'und-x-icu'`).Scan(&n)
			if n == 0 {
				t.Log("no ICU collation: the test runs under the database's own collation")
			} else {
				for _, stmt := range []string{
					`ALTER TABLE jobs ALTER COLUMN name TYPE varchar(255) COLLATE "und-x-icu"`,
					`ALTER TABLE lines ALTER COLUMN name TYPE varchar(255) COLLATE "und-x-icu"`,
					`ALTER TABLE knowledge_items ALTER COLUMN identifier TYPE varchar(128) COLLATE "und-x-icu"`,
				} {
					if err := db.Exec(stmt).Error; err != nil {
						t.Fatalf("%s: %v", stmt, err)
					}
				}
			}
		}
		names := []string{"ab", "a_b", "aB", "a-b"}
		want := "a-b aB a_b ab"
		for i, n := range names {
			if _, _, err := s.DeployJobVersion(ctx, n, manifest(i), fmt.Sprint("h", i)); err != nil {
				t.Fatal(err)
			}
			if _, _, err := s.DeployLineVersion(ctx, n, manifest(i), nil, fmt.Sprint("h", i)); err != nil {
				t.Fatal(err)
			}
		}
		jobs, err := s.ListJobs(ctx, 10, 0)
		if err != nil {
			t.Fatal(err)
		}
		if got := defNames(jobs); got != want {
			t.Errorf("jobs in order %q, want %q", got, want)
		}
		lines, err := s.ListLines(ctx, 10, 0)
		if err != nil {
			t.Fatal(err)
		}
		if got := defNames(lines); got != want {
			t.Errorf("lines in order %q, want %q", got, want)
		}
		// Identifiers are lowercase letters, digits and hyphens.
		for _, id := range []string{"aa", "a0", "a-b", "b"} {
			if _, err := s.CreateKnowledge(ctx, store.KnowledgeVersion{Identifier: id, Type: "prompt", Level: "prompt", Format: "text", ContentHash: "h"}); err != nil {
				t.Fatal(err)
			}
		}
		items, err := s.ListKnowledge(ctx, 10, 0)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, it := range items {
			ids = append(ids, it.Identifier)
		}
		if got := strings.Join(ids, " "); got != "a-b a0 aa b" {
			t.Errorf("knowledge in order %q, want %q", got, "a-b a0 aa b")
		}
	})
}

func defNames(defs []store.Job) string {
	names := make([]string, len(defs))
	for i, d := range defs {
		names[i] = d.Name
	}
	return strings.Join(names, " ")
}

// TestTouchToken: last_used_at is written on use, at most once per
// TokenTouchInterval.
func TestTouchToken(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, s *store.Store) {
		tok, err := s.CreateToken(context.Background(), "ci", "read", strings.Repeat("a", 64))
		if err != nil {
			t.Fatal(err)
		}
		if tok.LastUsedAt != nil {
			t.Fatalf("new token has last_used_at %v", tok.LastUsedAt)
		}
		t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		lastUsed := func() time.Time {
			t.Helper()
			got, err := s.GetTokenByName(ctx, "ci")
			if err != nil {
				t.Fatal(err)
			}
			if got.LastUsedAt == nil {
				t.Fatal("last_used_at is null")
			}
			return *got.LastUsedAt
		}
		for _, step := range []struct {
			at, want time.Time
		}{
			{t0, t0},
			{t0.Add(30 * time.Second), t0}, // within the interval: no write
			{t0.Add(59 * time.Second), t0}, // still within
			{t0.Add(61 * time.Second), t0.Add(61 * time.Second)},
		} {
			if err := s.TouchToken(ctx, tok.ID, step.at); err != nil {
				t.Fatal(err)
			}
			if got := lastUsed(); !got.Equal(step.want) {
				t.Fatalf("touch at %v: last_used_at %v, want %v", step.at, got, step.want)
			}
		}
	})
}
