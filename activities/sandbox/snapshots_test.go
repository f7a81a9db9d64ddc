package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/linefactory/linefactory/manifests"
)

// TestSnapshotsSharedBetweenWorkers: a snapshot taken by one driver (one
// worker's data dir) is restored by another that shares the bucket; a
// snapshot nobody took fails the provision clearly.
func TestSnapshotsSharedBetweenWorkers(t *testing.T) {
	ctx := context.Background()
	url, err := FileSnapshotsURL(filepath.Join(t.TempDir(), "shared"))
	if err != nil {
		t.Fatal(err)
	}
	shared, err := OpenSnapshots(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = shared.Close() })
	a, b := newLocal(t), newLocal(t)
	a.Snapshots, b.Snapshots = shared, shared

	src := acquire(t, a, Spec{Mode: "provision", Name: "src", InternetEnabled: true,
		SetupScripts: []manifests.SetupScript{{Script: "mkdir -p data && echo v1 > data/file"}}})
	info, err := a.Snapshot(ctx, src.Name, "snap1")
	if err != nil {
		t.Fatal(err)
	}
	if info.Size == 0 {
		t.Fatalf("snapshot info %+v", info)
	}
	if _, err := os.Stat(filepath.Join(a.root, "snapshots", "snap1.tar.gz")); err == nil {
		t.Fatal("the archive stayed in the worker's own directory")
	}
	restored := acquire(t, b, Spec{Mode: "provision", Name: "copy", SnapshotName: "snap1", InternetEnabled: true})
	if data, err := os.ReadFile(filepath.Join(restored.Root, "data", "file")); err != nil || string(data) != "v1\n" {
		t.Fatalf("restored on the other worker: %q %v", data, err)
	}
	if left, _ := filepath.Glob(filepath.Join(b.root, "snapshots", "restore-*")); len(left) > 0 {
		t.Fatalf("downloaded archives left behind: %v", left)
	}
	_, err = b.Acquire(ctx, Spec{Mode: "provision", Name: "none", SnapshotName: "never-taken", InternetEnabled: true})
	if CodeOf(err) != CodeProvisioningFailed {
		t.Fatalf("restore of a missing snapshot: %v, want %s", err, CodeProvisioningFailed)
	}
}
