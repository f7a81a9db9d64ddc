package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/linefactory/linefactory/manifests"
	"github.com/linefactory/linefactory/store"
)

// Lengths of the stored text columns that user input reaches; longer input is
// answered 422 rather than left to fail in the database.
const (
	maxCronLen      = 255
	maxTokenNameLen = 128
)

// ScheduleResponse is SPEC's line schedule.
type ScheduleResponse struct {
	Cron               string         `json:"cron"`
	Timezone           string         `json:"timezone"`
	Enabled            bool           `json:"enabled"`
	ScheduleGeneration int64          `json:"schedule_generation"`
	Inputs             map[string]any `json:"inputs"`
}

type scheduleRequest struct {
	Cron     *string        `json:"cron"`
	Timezone *string        `json:"timezone"`
	Enabled  *bool          `json:"enabled"`
	Inputs   map[string]any `json:"inputs"`
}

func scheduleResponse(sc store.LineSchedule) ScheduleResponse {
	return ScheduleResponse{Cron: sc.Cron, Timezone: sc.Timezone, Enabled: sc.Enabled, ScheduleGeneration: sc.ScheduleGeneration, Inputs: sc.Inputs}
}

func (s *Server) putSchedule(c *gin.Context) error {
	var req scheduleRequest
	if err := bindJSON(c, &req); err != nil {
		return err
	}
	if le := manifests.CheckParamsSize(req.Inputs); le != nil { // every firing's params
		le.Path = "inputs"
		return le
	}
	f := &fieldCheck{}
	f.require(req.Cron != nil, "cron")
	if req.Cron != nil {
		if len(*req.Cron) > maxCronLen {
			f.add("cron", "string_too_long", fmt.Sprintf("cron must be at most %d characters", maxCronLen), *req.Cron)
		} else if err := manifests.ValidateCron(*req.Cron); err != nil {
			f.add("cron", "value_error", err.Error(), *req.Cron)
		}
	}
	sc := store.LineSchedule{LineName: c.Param("name"), Timezone: "UTC", Enabled: true, Inputs: req.Inputs}
	if req.Timezone != nil {
		if err := manifests.ValidateTimezone(*req.Timezone); err != nil || *req.Timezone == "" {
			f.add("timezone", "value_error", "timezone must be an IANA name such as Europe/Paris", *req.Timezone)
		}
		sc.Timezone = *req.Timezone
	}
	ctx := c.Request.Context()
	if _, err := s.store.GetLine(ctx, sc.LineName); err != nil {
		if ferr := f.err(); ferr != nil {
			return ferr
		}
		return err
	}
	ps, err := s.scheduleInputProblems(ctx, sc.LineName, req.Inputs)
	if err != nil {
		return err
	}
	f.detail = append(f.detail, problemDetail(ps)...)
	if err := f.err(); err != nil {
		return err
	}
	sc.Cron = *req.Cron
	if req.Enabled != nil {
		sc.Enabled = *req.Enabled
	}
	if sc.Inputs == nil {
		sc.Inputs = map[string]any{}
	}
	out, err := s.saveSchedule(ctx, sc)
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, scheduleResponse(out))
	return nil
}

// scheduleInputProblems checks a schedule's inputs as a manual start's params
// (manifests.ApplyLineRunParams) against the line's latest version, its stages' jobs
// resolved now; a scheduled run has no other source of params, so required
// params must be among them. Problems are located at "inputs.<name>".
func (s *Server) scheduleInputProblems(ctx context.Context, name string, inputs map[string]any) (manifests.Problems, error) {
	v, err := s.store.LatestLineVersion(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil // no deployment to check against: the firing will say
	}
	if err != nil {
		return nil, err
	}
	var m manifests.LineManifest
	if err := json.Unmarshal(v.Manifest, &m); err != nil {
		return nil, fmt.Errorf("decode line version %s: %w", v.ID, err)
	}
	jobs, _, err := s.loadStageJobs(ctx, &m)
	if err != nil {
		return nil, err
	}
	_, ps := manifests.ApplyLineRunParams(&m, jobs, inputs)
	return relocate(ps, "params", "inputs"), nil
}

// saveSchedule stores a schedule and has the engine fire it.
func (s *Server) saveSchedule(ctx context.Context, sc store.LineSchedule) (store.LineSchedule, error) {
	defer s.schedules.lock(sc.LineName)()
	out, err := s.store.UpsertLineSchedule(ctx, sc)
	if err != nil {
		return out, err
	}
	if s.cfg.Runs != nil {
		if err := s.cfg.Runs.UpsertSchedule(ctx, out); err != nil {
			return out, httpError(http.StatusBadGateway, CodeBadGateway, "the schedule was stored but the workflow engine did not take it: %v", err)
		}
	}
	return out, nil
}

func (s *Server) getSchedule(c *gin.Context) error {
	sc, err := s.store.GetLineSchedule(c.Request.Context(), c.Param("name"))
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, scheduleResponse(sc))
	return nil
}

func (s *Server) deleteSchedule(c *gin.Context) error {
	defer s.schedules.lock(c.Param("name"))()
	if err := s.store.DeleteLineSchedule(c.Request.Context(), c.Param("name")); err != nil {
		return err
	}
	if s.cfg.Runs != nil {
		if err := s.cfg.Runs.DeleteSchedule(c.Request.Context(), c.Param("name")); err != nil {
			return httpError(http.StatusBadGateway, CodeBadGateway, "the schedule was deleted but the workflow engine did not drop it: %v", err)
		}
	}
	c.Status(http.StatusNoContent)
	return nil
}

// TokenResponse describes a token; Token (the secret) is shown only once,
// when it is created.
type TokenResponse struct {
	Name       string     `json:"name"`
	Scope      string     `json:"scope"`
	CreatedAt  time.Time  `json:"created_at"`
	LastUsedAt *time.Time `json:"last_used_at"`
	Token      string     `json:"token,omitempty"`
}

type tokenRequest struct {
	Name  *string `json:"name"`
	Scope *string `json:"scope"`
}

func (s *Server) createToken(c *gin.Context) error {
	var req tokenRequest
	if err := bindJSON(c, &req); err != nil {
		return err
	}
	f := &fieldCheck{}
	f.require(req.Name != nil && *req.Name != "", "name")
	if req.Name != nil && len(*req.Name) > maxTokenNameLen {
		f.add("name", "string_too_long", fmt.Sprintf("name must be at most %d characters", maxTokenNameLen), *req.Name)
	} else if req.Name != nil && *req.Name != "" && !ValidTokenName(*req.Name) {
		f.add("name", "string_pattern_mismatch", "name must be letters, digits, '.', '_' and '-', starting with a letter or digit", *req.Name)
	}
	scope := ScopeRead
	if req.Scope != nil {
		scope = *req.Scope
		if !ValidScope(scope) {
			f.add("scope", "enum", "scope must be read, write or admin", scope)
		}
	}
	if err := f.err(); err != nil {
		return err
	}
	secret := NewTokenSecret()
	tok, err := s.store.CreateToken(c.Request.Context(), *req.Name, scope, s.cfg.TokenKey.Hash(secret))
	if err != nil {
		return err
	}
	c.JSON(http.StatusCreated, TokenResponse{Name: tok.Name, Scope: tok.Scope, CreatedAt: tok.CreatedAt, LastUsedAt: tok.LastUsedAt, Token: secret})
	return nil
}

func (s *Server) listTokens(c *gin.Context) error {
	toks, err := s.store.ListTokens(c.Request.Context())
	if err != nil {
		return err
	}
	out := make([]TokenResponse, len(toks))
	for i, t := range toks {
		out[i] = TokenResponse{Name: t.Name, Scope: t.Scope, CreatedAt: t.CreatedAt, LastUsedAt: t.LastUsedAt}
	}
	c.JSON(http.StatusOK, out)
	return nil
}

func (s *Server) deleteToken(c *gin.Context) error {
	if err := s.store.DeleteToken(c.Request.Context(), c.Param("name")); err != nil {
		return err
	}
	s.tokens.purge()
	c.Status(http.StatusNoContent)
	return nil
}

// keyedMutex is a set of mutexes by key.
type keyedMutex struct{ m sync.Map }

// lock locks key's mutex and returns its unlock.
func (k *keyedMutex) lock(key string) func() {
	v, _ := k.m.LoadOrStore(key, &sync.Mutex{})
	mu := v.(*sync.Mutex)
	mu.Lock()
	return mu.Unlock
}
