package workflows

import (
	"path/filepath"
	"strings"
	"testing"

	"go.temporal.io/sdk/worker"
)

// TestReplayRecordedHistories replays every history recorded from a real
// server (testdata/histories, written by cmd/factoryd's
// TestRecordReplayHistories with FACTORY_RECORD_HISTORIES=1) against the
// current workflow code. A change that would break runs in flight — a
// command added, removed or reordered without workflow.GetVersion — fails
// here with a nondeterminism error.
func TestReplayRecordedHistories(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "histories", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no recorded histories in testdata/histories: record them with FACTORY_RECORD_HISTORIES=1 go test -run TestRecordReplayHistories ./cmd/factoryd")
	}
	// The histories must cover what the manager, the job run (one that
	// continued as new included: TestRecordChainHistories) and the
	// schedule firings do, firings begun before admit-in-activity, and a
	// job run begun before jobrun-local-sandbox (jobrun-greet-v0: its
	// sandbox acquired by an activity).
	for _, want := range []string{"jobrun-greet", "jobrun-greet-v0", "jobrun-chain-", "linerun-loop", "linerun-select", "schedulefire-line", "schedulefire-job",
		"schedulefire-line-v0", "schedulefire-job-v0"} {
		found := false
		for _, f := range files {
			found = found || strings.HasPrefix(filepath.Base(f), want)
		}
		if !found {
			t.Errorf("no recorded history named %s*", want)
		}
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			replayer := worker.NewWorkflowReplayer()
			RegisterWorkflows(replayer)
			if err := replayer.ReplayWorkflowHistoryFromJSONFile(nil, file); err != nil {
				t.Fatalf("replay %s: %v", file, err)
			}
		})
	}
}
