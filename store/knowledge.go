package store

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"
)

// KnowledgeLink links a knowledge version to a repository or a tag.
type KnowledgeLink struct {
	LinkType string `json:"link_type"`
	Value    string `json:"value"`
}

// KnowledgeVersion is one version of a knowledge item.
type KnowledgeVersion struct {
	ID            string
	Identifier    string
	VersionNumber int
	Type          string
	Level         string
	Format        string
	Body          string
	Metadata      map[string]any
	Links         []KnowledgeLink
	ContentHash   string
	ByteSize      int64
	CreatedAt     time.Time
}

// KnowledgeItem is a knowledge identifier with its latest version number.
type KnowledgeItem struct {
	Identifier          string
	Type                string
	LatestVersionNumber int
	CreatedAt           time.Time
}

type knowledgeItemModel struct {
	Identifier          string `gorm:"primaryKey;size:128"`
	Type                string `gorm:"size:32"`
	LatestVersionNumber int
	CreatedAt           time.Time
}

func (knowledgeItemModel) TableName() string { return "knowledge_items" }

type knowledgeVersionModel struct {
	ID            string `gorm:"primaryKey;size:64"`
	Identifier    string `gorm:"size:128;not null"` // unique with VersionNumber: see migrate
	VersionNumber int    `gorm:"not null"`
	Type          string `gorm:"size:32"`
	Level         string `gorm:"size:32"`
	Format        string `gorm:"size:64"`
	Body          string
	Metadata      JSON[map[string]any]
	Links         JSON[[]KnowledgeLink]
	ContentHash   string `gorm:"size:80"`
	ByteSize      int64
	CreatedAt     time.Time
}

func (knowledgeVersionModel) TableName() string { return "knowledge_versions" }

func (m knowledgeVersionModel) domain() KnowledgeVersion {
	links := m.Links.V
	if links == nil {
		links = []KnowledgeLink{}
	}
	meta := m.Metadata.V
	if meta == nil {
		meta = map[string]any{}
	}
	return KnowledgeVersion{ID: m.ID, Identifier: m.Identifier, VersionNumber: m.VersionNumber, Type: m.Type, Level: m.Level,
		Format: m.Format, Body: m.Body, Metadata: meta, Links: links, ContentHash: m.ContentHash, ByteSize: m.ByteSize, CreatedAt: m.CreatedAt.UTC()}
}

// CreateKnowledge creates a knowledge item with v as its version 1;
// ErrConflict if the identifier is taken.
func (s *Store) CreateKnowledge(ctx context.Context, v KnowledgeVersion) (KnowledgeVersion, error) {
	var out KnowledgeVersion
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		now := s.now()
		if err := tx.Create(&knowledgeItemModel{Identifier: v.Identifier, Type: v.Type, LatestVersionNumber: 1, CreatedAt: now}).Error; err != nil {
			return err
		}
		m := knowledgeModel(v, 1, now)
		if err := tx.Create(&m).Error; err != nil {
			return err
		}
		out = m.domain()
		return nil
	})
	return out, translate(err, fmt.Sprintf("create knowledge %q", v.Identifier))
}

func knowledgeModel(v KnowledgeVersion, n int, now time.Time) knowledgeVersionModel {
	return knowledgeVersionModel{ID: NewID("kv_"), Identifier: v.Identifier, VersionNumber: n, Type: v.Type, Level: v.Level,
		Format: v.Format, Body: v.Body, Metadata: JSON[map[string]any]{v.Metadata}, Links: JSON[[]KnowledgeLink]{v.Links},
		ContentHash: v.ContentHash, ByteSize: v.ByteSize, CreatedAt: now}
}

// AddKnowledgeVersion adds the next version of an existing item; when the
// latest version has the same content hash it is returned with created=false.
func (s *Store) AddKnowledgeVersion(ctx context.Context, v KnowledgeVersion) (KnowledgeVersion, bool, error) {
	var (
		out     KnowledgeVersion
		created bool
	)
	var err error
	for attempt := 0; attempt < 10; attempt++ {
		err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			var item knowledgeItemModel
			if err := s.forUpdate(tx).Where("identifier = ?", v.Identifier).Take(&item).Error; err != nil {
				return err
			}
			var latest knowledgeVersionModel
			if err := tx.Where("identifier = ?", v.Identifier).Order("version_number desc").Take(&latest).Error; err != nil {
				return err
			}
			if latest.ContentHash == v.ContentHash {
				out, created = latest.domain(), false
				return nil
			}
			m := knowledgeModel(v, latest.VersionNumber+1, s.now())
			if err := tx.Create(&m).Error; err != nil {
				return err
			}
			if err := tx.Model(&knowledgeItemModel{}).Where("identifier = ?", v.Identifier).
				Updates(map[string]any{"latest_version_number": m.VersionNumber, "type": m.Type}).Error; err != nil {
				return err
			}
			out, created = m.domain(), true
			return nil
		})
		if !isDuplicate(err) {
			break
		}
	}
	return out, created, translate(err, fmt.Sprintf("knowledge %q", v.Identifier))
}

// ListKnowledge lists knowledge items by identifier ascending, in byte order.
func (s *Store) ListKnowledge(ctx context.Context, limit, offset int) ([]KnowledgeItem, error) {
	limit, offset = clampPage(limit, offset)
	var rows []knowledgeItemModel
	if err := s.db.WithContext(ctx).Order(s.byteOrder("identifier")).Limit(limit).Offset(offset).Find(&rows).Error; err != nil {
		return nil, translate(err, "list knowledge")
	}
	out := make([]KnowledgeItem, len(rows))
	for i, r := range rows {
		out[i] = KnowledgeItem{Identifier: r.Identifier, Type: r.Type, LatestVersionNumber: r.LatestVersionNumber, CreatedAt: r.CreatedAt.UTC()}
	}
	return out, nil
}

// GetKnowledge returns an item and its latest version.
func (s *Store) GetKnowledge(ctx context.Context, identifier string) (KnowledgeItem, KnowledgeVersion, error) {
	var item knowledgeItemModel
	if err := s.db.WithContext(ctx).Where("identifier = ?", identifier).Take(&item).Error; err != nil {
		return KnowledgeItem{}, KnowledgeVersion{}, translate(err, fmt.Sprintf("knowledge %q", identifier))
	}
	v, err := s.GetKnowledgeVersion(ctx, identifier, item.LatestVersionNumber)
	return KnowledgeItem{Identifier: item.Identifier, Type: item.Type, LatestVersionNumber: item.LatestVersionNumber, CreatedAt: item.CreatedAt.UTC()}, v, err
}

// GetKnowledgeVersion returns version n of an item.
func (s *Store) GetKnowledgeVersion(ctx context.Context, identifier string, n int) (KnowledgeVersion, error) {
	var m knowledgeVersionModel
	err := s.db.WithContext(ctx).Where("identifier = ? AND version_number = ?", identifier, n).Take(&m).Error
	if err != nil {
		return KnowledgeVersion{}, translate(err, fmt.Sprintf("knowledge %q version %d", identifier, n))
	}
	return m.domain(), nil
}
