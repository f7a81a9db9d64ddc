package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// Worker is a worker process as it last reported itself: its identity (kept
// in its data directory, so stable across restarts), the task queue only it
// polls, its step capacity and when it was last seen alive.
type Worker struct {
	ID        string
	Queue     string
	MaxSteps  int
	StartedAt time.Time
	SeenAt    time.Time
}

type workerModel struct {
	ID        string `gorm:"primaryKey"`
	Queue     string `gorm:"not null"`
	MaxSteps  int    `gorm:"not null"`
	StartedAt time.Time
	SeenAt    time.Time `gorm:"index"`
}

func (workerModel) TableName() string { return "workers" }

// sandboxPlacementModel says which worker holds a sandbox: a sandbox lives
// on the disk of one worker, and everything that uses it must run there.
type sandboxPlacementModel struct {
	Name      string `gorm:"primaryKey"`
	WorkerID  string `gorm:"not null;index"`
	CreatedAt time.Time
}

func (sandboxPlacementModel) TableName() string { return "sandbox_placements" }

func (s *Store) migrateWorkers(ctx context.Context) error {
	return s.db.WithContext(ctx).AutoMigrate(&workerModel{}, &sandboxPlacementModel{})
}

// HeartbeatWorker records that a worker is alive now (creating its row on
// its first beat; StartedAt is kept from the row's creation).
func (s *Store) HeartbeatWorker(ctx context.Context, w Worker) error {
	now := s.now()
	if w.StartedAt.IsZero() {
		w.StartedAt = now
	}
	m := workerModel{ID: w.ID, Queue: w.Queue, MaxSteps: w.MaxSteps, StartedAt: w.StartedAt.UTC(), SeenAt: now}
	err := s.db.WithContext(ctx).Clauses(clause.OnConflict{
		Columns:   []clause.Column{{Name: "id"}},
		DoUpdates: clause.AssignmentColumns([]string{"queue", "max_steps", "started_at", "seen_at"}),
	}).Create(&m).Error
	return translate(err, "heartbeat worker "+w.ID)
}

// GetWorker returns a worker by id (ErrNotFound: never seen).
func (s *Store) GetWorker(ctx context.Context, id string) (Worker, error) {
	var m workerModel
	if err := s.db.WithContext(ctx).First(&m, "id = ?", id).Error; err != nil {
		return Worker{}, translate(err, "worker "+id)
	}
	return Worker{ID: m.ID, Queue: m.Queue, MaxSteps: m.MaxSteps, StartedAt: m.StartedAt.UTC(), SeenAt: m.SeenAt.UTC()}, nil
}

// ListWorkers returns every worker ever seen, by id.
func (s *Store) ListWorkers(ctx context.Context) ([]Worker, error) {
	var ms []workerModel
	if err := s.db.WithContext(ctx).Order("id").Find(&ms).Error; err != nil {
		return nil, translate(err, "list workers")
	}
	out := make([]Worker, len(ms))
	for i, m := range ms {
		out[i] = Worker{ID: m.ID, Queue: m.Queue, MaxSteps: m.MaxSteps, StartedAt: m.StartedAt.UTC(), SeenAt: m.SeenAt.UTC()}
	}
	return out, nil
}

// PlaceSandbox records that workerID holds the sandbox name, unless another
// worker holds it already; it returns the holder either way. Concurrent
// calls for one name agree on a single holder.
func (s *Store) PlaceSandbox(ctx context.Context, name, workerID string) (string, error) {
	db := s.db.WithContext(ctx)
	m := sandboxPlacementModel{Name: name, WorkerID: workerID, CreatedAt: s.now()}
	res := db.Clauses(clause.OnConflict{DoNothing: true}).Create(&m)
	if res.Error != nil {
		return "", translate(res.Error, "place sandbox "+name)
	}
	if res.RowsAffected == 1 { // placed here now: no need to read it back
		return workerID, nil
	}
	return s.SandboxWorker(ctx, name)
}

// MoveSandbox hands the sandbox name from worker from to worker to; false
// when from no longer holds it.
func (s *Store) MoveSandbox(ctx context.Context, name, from, to string) (bool, error) {
	res := s.db.WithContext(ctx).Model(&sandboxPlacementModel{}).Where("name = ? AND worker_id = ?", name, from).
		Updates(map[string]any{"worker_id": to, "created_at": s.now()})
	if res.Error != nil {
		return false, translate(res.Error, "move sandbox "+name)
	}
	return res.RowsAffected == 1, nil
}

// SandboxWorker returns the id of the worker that holds a sandbox
// (ErrNotFound: none does).
func (s *Store) SandboxWorker(ctx context.Context, name string) (string, error) {
	var m sandboxPlacementModel
	err := s.db.WithContext(ctx).First(&m, "name = ?", name).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return "", fmt.Errorf("sandbox %s: %w", name, ErrNotFound)
	}
	if err != nil {
		return "", translate(err, "sandbox "+name)
	}
	return m.WorkerID, nil
}

// UnplaceSandbox forgets that workerID holds the sandbox name (it was
// deleted there); a placement by another worker is left alone.
func (s *Store) UnplaceSandbox(ctx context.Context, name, workerID string) error {
	err := s.db.WithContext(ctx).Where("name = ? AND worker_id = ?", name, workerID).Delete(&sandboxPlacementModel{}).Error
	return translate(err, "unplace sandbox "+name)
}
