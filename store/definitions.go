package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"
)

// Job is a job name with its latest version number (nil before any version).
type Job struct {
	ID                  string
	Name                string
	LatestVersionNumber *int
	CreatedAt           time.Time
}

// JobVersion is one deployed version of a job: its normalized manifest as
// JSON and the manifest's content hash.
type JobVersion struct {
	ID            string
	JobName       string
	VersionNumber int
	ContentHash   string
	Manifest      json.RawMessage
	DeployedAt    time.Time
}

// Line is a line name with its latest version number.
type Line = Job

// LineVersion is one deployment of a line; InputParams is the JSON list of
// params a run of that version accepts.
type LineVersion struct {
	ID            string
	LineName      string
	VersionNumber int
	ContentHash   string
	Manifest      json.RawMessage
	InputParams   json.RawMessage
	DeployedAt    time.Time
}

// definitionModel is a row of jobs or lines.
type definitionModel struct {
	ID                  string `gorm:"primaryKey;size:64"`
	Name                string `gorm:"uniqueIndex;size:255;not null"`
	LatestVersionNumber *int
	CreatedAt           time.Time
}

// versionModel is a row of job_versions or line_versions.
type versionModel struct {
	ID            string `gorm:"primaryKey;size:64"`
	Name          string `gorm:"size:255;not null"` // unique with VersionNumber: see migrate
	VersionNumber int    `gorm:"not null"`
	ContentHash   string `gorm:"size:80;not null"`
	Manifest      JSON[json.RawMessage]
	InputParams   JSON[json.RawMessage]
	DeployedAt    time.Time
}

// kind names the two tables of one kind of definition.
type kind struct {
	defs, versions, defPrefix, versionPrefix, what string
}

var (
	jobKind  = kind{"jobs", "job_versions", "job_", "jv_", "job"}
	lineKind = kind{"lines", "line_versions", "line_", "lv_", "line"}
)

// deploy stores a new version of a definition unless the latest version has
// the same hash. The definition row is locked (PostgreSQL) so concurrent
// deploys of one name are serialized; the unique index on (name,
// version_number) guards the rest and a conflict is retried.
func (s *Store) deploy(ctx context.Context, k kind, name string, manifest, inputParams json.RawMessage, hash string) (versionModel, bool, error) {
	var (
		out     versionModel
		created bool
	)
	var err error
	for attempt := 0; attempt < 10; attempt++ {
		err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			now := s.now()
			var def definitionModel
			res := s.forUpdate(tx.Table(k.defs)).Where("name = ?", name).Take(&def)
			if errors.Is(res.Error, gorm.ErrRecordNotFound) {
				def = definitionModel{ID: NewID(k.defPrefix), Name: name, CreatedAt: now}
				if err := tx.Table(k.defs).Create(&def).Error; err != nil {
					return err
				}
				if err := s.forUpdate(tx.Table(k.defs)).Where("name = ?", name).Take(&def).Error; err != nil {
					return err
				}
			} else if res.Error != nil {
				return res.Error
			}
			var latest versionModel
			res = tx.Table(k.versions).Where("name = ?", name).Order("version_number desc").Limit(1).Take(&latest)
			next := 1
			switch {
			case res.Error == nil:
				if latest.ContentHash == hash {
					out, created = latest, false
					return nil
				}
				next = latest.VersionNumber + 1
			case !errors.Is(res.Error, gorm.ErrRecordNotFound):
				return res.Error
			}
			v := versionModel{
				ID: NewID(k.versionPrefix), Name: name, VersionNumber: next, ContentHash: hash,
				Manifest: JSON[json.RawMessage]{manifest}, InputParams: JSON[json.RawMessage]{inputParams}, DeployedAt: now,
			}
			if err := tx.Table(k.versions).Create(&v).Error; err != nil {
				return err
			}
			if err := tx.Table(k.defs).Where("id = ?", def.ID).Update("latest_version_number", next).Error; err != nil {
				return err
			}
			out, created = v, true
			return nil
		})
		if !isDuplicate(err) {
			break
		}
	}
	if err != nil {
		return versionModel{}, false, translate(err, "deploy "+k.what+" "+name)
	}
	return out, created, nil
}

func (s *Store) listDefs(ctx context.Context, k kind, limit, offset int) ([]Job, error) {
	limit, offset = clampPage(limit, offset)
	var rows []definitionModel
	if err := s.db.WithContext(ctx).Table(k.defs).Order(s.byteOrder("name")).Limit(limit).Offset(offset).Find(&rows).Error; err != nil {
		return nil, translate(err, "list "+k.defs)
	}
	out := make([]Job, len(rows))
	for i, r := range rows {
		out[i] = Job(r)
	}
	return out, nil
}

func (s *Store) getDef(ctx context.Context, k kind, name string) (Job, error) {
	var r definitionModel
	if err := s.db.WithContext(ctx).Table(k.defs).Where("name = ?", name).Take(&r).Error; err != nil {
		return Job{}, translate(err, fmt.Sprintf("%s %q", k.what, name))
	}
	return Job(r), nil
}

func (s *Store) listVersions(ctx context.Context, k kind, name string, limit, offset int) ([]versionModel, error) {
	if _, err := s.getDef(ctx, k, name); err != nil {
		return nil, err
	}
	limit, offset = clampPage(limit, offset)
	var rows []versionModel
	err := s.db.WithContext(ctx).Table(k.versions).Where("name = ?", name).
		Order("version_number desc").Limit(limit).Offset(offset).Find(&rows).Error
	return rows, translate(err, "list "+k.versions)
}

func (s *Store) getVersion(ctx context.Context, k kind, where string, args ...any) (versionModel, error) {
	var r versionModel
	err := s.db.WithContext(ctx).Table(k.versions).Where(where, args...).Order("version_number desc").Limit(1).Take(&r).Error
	return r, translate(err, k.what+" version")
}

func toJobVersion(v versionModel) JobVersion {
	return JobVersion{ID: v.ID, JobName: v.Name, VersionNumber: v.VersionNumber, ContentHash: v.ContentHash, Manifest: v.Manifest.V, DeployedAt: v.DeployedAt.UTC()}
}

func toLineVersion(v versionModel) LineVersion {
	return LineVersion{ID: v.ID, LineName: v.Name, VersionNumber: v.VersionNumber, ContentHash: v.ContentHash,
		Manifest: v.Manifest.V, InputParams: v.InputParams.V, DeployedAt: v.DeployedAt.UTC()}
}

// DeployJobVersion stores a job version: numbers start at 1 per name; when
// the latest version has the same content hash it is returned with
// created=false and nothing is stored.
func (s *Store) DeployJobVersion(ctx context.Context, name string, manifest json.RawMessage, contentHash string) (JobVersion, bool, error) {
	v, created, err := s.deploy(ctx, jobKind, name, manifest, nil, contentHash)
	return toJobVersion(v), created, err
}

// ListJobs lists jobs by name ascending, in byte order on both databases.
func (s *Store) ListJobs(ctx context.Context, limit, offset int) ([]Job, error) {
	return s.listDefs(ctx, jobKind, limit, offset)
}

// GetJob returns a job by name.
func (s *Store) GetJob(ctx context.Context, name string) (Job, error) {
	return s.getDef(ctx, jobKind, name)
}

// ListJobVersions lists a job's versions, newest first.
func (s *Store) ListJobVersions(ctx context.Context, name string, limit, offset int) ([]JobVersion, error) {
	rows, err := s.listVersions(ctx, jobKind, name, limit, offset)
	out := make([]JobVersion, len(rows))
	for i, r := range rows {
		out[i] = toJobVersion(r)
	}
	return out, err
}

// GetJobVersion returns the version of job name with the given id.
func (s *Store) GetJobVersion(ctx context.Context, name, versionID string) (JobVersion, error) {
	v, err := s.getVersion(ctx, jobKind, "name = ? AND id = ?", name, versionID)
	return toJobVersion(v), err
}

// GetJobVersionByID returns a job version by id.
func (s *Store) GetJobVersionByID(ctx context.Context, id string) (JobVersion, error) {
	v, err := s.getVersion(ctx, jobKind, "id = ?", id)
	return toJobVersion(v), err
}

// LatestJobVersion returns the newest version of a job.
func (s *Store) LatestJobVersion(ctx context.Context, name string) (JobVersion, error) {
	v, err := s.getVersion(ctx, jobKind, "name = ?", name)
	return toJobVersion(v), err
}

// DeployLineVersion stores a line deployment; see DeployJobVersion.
func (s *Store) DeployLineVersion(ctx context.Context, name string, manifest, inputParams json.RawMessage, contentHash string) (LineVersion, bool, error) {
	v, created, err := s.deploy(ctx, lineKind, name, manifest, inputParams, contentHash)
	return toLineVersion(v), created, err
}

// ListLines lists lines by name ascending, in byte order on both databases.
func (s *Store) ListLines(ctx context.Context, limit, offset int) ([]Line, error) {
	return s.listDefs(ctx, lineKind, limit, offset)
}

// GetLine returns a line by name.
func (s *Store) GetLine(ctx context.Context, name string) (Line, error) {
	return s.getDef(ctx, lineKind, name)
}

// LatestLineVersion returns the newest deployment of a line.
func (s *Store) LatestLineVersion(ctx context.Context, name string) (LineVersion, error) {
	v, err := s.getVersion(ctx, lineKind, "name = ?", name)
	return toLineVersion(v), err
}

// GetLineVersionByID returns a line deployment by id.
func (s *Store) GetLineVersionByID(ctx context.Context, id string) (LineVersion, error) {
	v, err := s.getVersion(ctx, lineKind, "id = ?", id)
	return toLineVersion(v), err
}

// ListLineVersions lists a line's deployments, newest first.
func (s *Store) ListLineVersions(ctx context.Context, name string, limit, offset int) ([]LineVersion, error) {
	rows, err := s.listVersions(ctx, lineKind, name, limit, offset)
	out := make([]LineVersion, len(rows))
	for i, r := range rows {
		out[i] = toLineVersion(r)
	}
	return out, err
}
