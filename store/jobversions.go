package store

import (
	"context"
	"errors"
)

// JobVersionLookup finds job versions.
type JobVersionLookup interface {
	GetJobVersion(ctx context.Context, name, versionID string) (JobVersion, error)
	LatestJobVersion(ctx context.Context, name string) (JobVersion, error)
}

// JobVersionLoader adapts l to a loader of job versions by job name and
// version id (the latest when empty), as manifests.ResolveStageJobs takes
// it: found is false when the job or version does not exist.
func JobVersionLoader(ctx context.Context, l JobVersionLookup) func(job, versionID string) (id string, manifest []byte, found bool, err error) {
	return func(job, versionID string) (string, []byte, bool, error) {
		var (
			v   JobVersion
			err error
		)
		if versionID != "" {
			v, err = l.GetJobVersion(ctx, job, versionID)
		} else {
			v, err = l.LatestJobVersion(ctx, job)
		}
		switch {
		case errors.Is(err, ErrNotFound):
			return "", nil, false, nil
		case err != nil:
			return "", nil, false, err
		}
		return v.ID, v.Manifest, true, nil
	}
}
