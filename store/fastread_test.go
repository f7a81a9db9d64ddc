package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"os"
	"testing"

	"github.com/linefactory/linefactory/store"
	"github.com/linefactory/linefactory/store/storetest"
)

// TestReadsByIDExecModes: the reads by id on PostgreSQL, which go below
// database/sql, answer the same whatever statements the DSN lets pgx keep on
// the server (prepared once per connection by default; an unnamed statement
// per read for the modes a pooler in transaction mode needs), repeatedly on
// the same connections, and a missing id is ErrNotFound.
func TestReadsByIDExecModes(t *testing.T) {
	base := os.Getenv(storetest.PostgresEnv)
	if base == "" {
		t.Skipf("SKIPPING PostgreSQL: %s is unset", storetest.PostgresEnv)
	}
	for _, mode := range []string{"", "cache_statement", "cache_describe", "describe_exec", "exec", "simple_protocol"} {
		t.Run("mode="+mode, func(t *testing.T) {
			dsn := storetest.FreshSchema(t, base, "t")
			if mode != "" {
				u, err := url.Parse(dsn)
				if err != nil {
					t.Fatal(err)
				}
				q := u.Query()
				q.Set("default_query_exec_mode", mode)
				u.RawQuery = q.Encode()
				dsn = u.String()
			}
			st, err := store.Open(context.Background(), dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			ctx := context.Background()
			jr, err := st.CreateJobRun(ctx, store.JobRun{JobName: "j", JobVersionID: "jv_1", Status: "queued",
				StepTimeline: []store.StepTimelineEntry{{Name: "s1", TaskName: "t", Status: "pending"}}})
			if err != nil {
				t.Fatal(err)
			}
			lr, err := st.CreateLineRun(ctx, store.LineRun{LineName: "l", Status: "queued"})
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 3; i++ {
				doc, err := st.GetJobRunJSON(ctx, jr.ID)
				if err != nil {
					t.Fatal(err)
				}
				var got store.JobRun
				if err := json.Unmarshal(doc, &got); err != nil || got.ID != jr.ID || len(got.StepTimeline) != 1 || got.StepTimeline[0].Name != "s1" {
					t.Fatalf("GetJobRunJSON: %v %s", err, doc)
				}
				doc, err = st.GetLineRunJSON(ctx, lr.ID)
				if err != nil {
					t.Fatal(err)
				}
				var gotLine store.LineRun
				if err := json.Unmarshal(doc, &gotLine); err != nil || gotLine.ID != lr.ID || gotLine.LineName != "l" {
					t.Fatalf("GetLineRunJSON: %v %s", err, doc)
				}
			}
			if _, err := st.GetJobRunJSON(ctx, "jr_missing"); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("missing job run: %v", err)
			}
			if _, err := st.GetLineRunJSON(ctx, "lr_missing"); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("missing line run: %v", err)
			}
		})
	}
}
