package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	neturl "net/url"
	"os"
	"path/filepath"

	"gocloud.dev/blob"
	_ "gocloud.dev/blob/fileblob" // file:// buckets
	_ "gocloud.dev/blob/s3blob"   // s3:// buckets (and S3-compatible stores: ?endpoint=…)
	"gocloud.dev/gcerrors"
)

// Snapshots keeps snapshot archives in a blob bucket that every worker
// shares (a directory on a shared volume, or object storage), so a snapshot
// taken on one worker is restored on any other. An archive is the object
// <name>.tar.gz.
type Snapshots struct {
	bucket *blob.Bucket
	url    string
}

// OpenSnapshots opens the bucket a URL names: file:///dir (the directory
// is made when missing) or s3://bucket?region=… (credentials from the usual AWS
// environment).
func OpenSnapshots(ctx context.Context, url string) (*Snapshots, error) {
	if u, err := neturl.Parse(url); err == nil && u.Scheme == "file" && u.Path != "" {
		if err := os.MkdirAll(filepath.FromSlash(u.Path), 0o755); err != nil {
			return nil, fmt.Errorf("snapshot storage %s: %w", url, err)
		}
	}
	b, err := blob.OpenBucket(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("snapshot storage %s: %w", url, err)
	}
	return &Snapshots{bucket: b, url: url}, nil
}

// FileSnapshotsURL is the URL of a snapshot bucket in a local directory.
func FileSnapshotsURL(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	return "file://" + filepath.ToSlash(abs) + "?create_dir=true&metadata=skip", nil
}

// URL is the bucket's URL.
func (s *Snapshots) URL() string { return s.url }

// Close releases the bucket.
func (s *Snapshots) Close() error { return s.bucket.Close() }

func snapshotKey(name string) string { return name + ".tar.gz" }

// put uploads the archive at path as snapshot name, replacing any earlier
// one; readers see the old or the new archive, never a part.
func (s *Snapshots) put(ctx context.Context, name, path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := s.bucket.NewWriter(wctx, snapshotKey(name), &blob.WriterOptions{ContentType: "application/gzip"})
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(w, f)
	if err != nil {
		cancel() // aborts the write instead of committing a part
		_ = w.Close()
		return 0, err
	}
	return n, w.Close()
}

// fetch downloads snapshot name into a temporary file in dir; the caller
// removes it.
func (s *Snapshots) fetch(ctx context.Context, name, dir string) (string, error) {
	r, err := s.bucket.NewReader(ctx, snapshotKey(name), nil)
	if gcerrors.Code(err) == gcerrors.NotFound {
		return "", fmt.Errorf("no snapshot %q in %s: %w", name, s.url, os.ErrNotExist)
	}
	if err != nil {
		return "", err
	}
	defer r.Close()
	f, err := os.CreateTemp(dir, "restore-*.tar.gz")
	if err != nil {
		return "", err
	}
	_, err = io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

// snapshotArchive is a local file holding snapshot name's archive, and how
// to let go of it.
func (l *Local) snapshotArchive(ctx context.Context, name string) (path string, done func(), err error) {
	if l.Snapshots == nil {
		return l.snapshotPath(name), func() {}, nil
	}
	path, err = l.Snapshots.fetch(ctx, name, filepath.Join(l.root, "snapshots"))
	if err != nil {
		return "", nil, err
	}
	return path, func() { _ = os.Remove(path) }, nil
}

// keepSnapshot stores the archive made at tmp as snapshot name: in the
// shared bucket, or beside the sandboxes without one.
func (l *Local) keepSnapshot(ctx context.Context, name, tmp string) (SnapshotInfo, error) {
	if l.Snapshots == nil {
		path := l.snapshotPath(name)
		if err := os.Rename(tmp, path); err != nil {
			return SnapshotInfo{}, err
		}
		st, err := os.Stat(path)
		if err != nil {
			return SnapshotInfo{}, err
		}
		return SnapshotInfo{Name: name, Path: path, Size: st.Size()}, nil
	}
	defer os.Remove(tmp)
	n, err := l.Snapshots.put(ctx, name, tmp)
	if err != nil {
		return SnapshotInfo{}, errors.Join(fmt.Errorf("upload to %s", l.Snapshots.url), err)
	}
	return SnapshotInfo{Name: name, Path: snapshotKey(name), Size: n}, nil
}
