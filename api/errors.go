package api

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/linefactory/linefactory/manifests"
	"github.com/linefactory/linefactory/store"
)

// Error codes of the error body (SPEC "Errors").
const (
	CodeAuthRequired        = "AUTH_REQUIRED"
	CodeInvalidRequest      = "INVALID_REQUEST"
	CodeNotFound            = "NOT_FOUND"
	CodeValidation          = "VALIDATION_ERROR"
	CodeAccessDenied        = "ACCESS_DENIED"
	CodeRateLimited         = "RATE_LIMITED"
	CodeInternal            = "INTERNAL_ERROR"
	CodeBadGateway          = "BAD_GATEWAY"
	CodeResourceUnavailable = "RESOURCE_UNAVAILABLE"
)

// ErrorBody is SPEC's error body.
type ErrorBody struct {
	Code      string  `json:"code"`
	Message   string  `json:"message"`
	Available *int64  `json:"available"`
	Limit     *int64  `json:"limit"`
	Requested *int64  `json:"requested"`
	Resource  *string `json:"resource"`
	RequestID *string `json:"request_id"`
}

// FieldError is one entry of the validation error body.
type FieldError struct {
	Loc   []any  `json:"loc"`
	Msg   string `json:"msg"`
	Type  string `json:"type"`
	Input any    `json:"input,omitempty"`
}

// ValidationBody is SPEC's validation error body (HTTP 422 outside deploys).
type ValidationBody struct {
	Detail []FieldError `json:"detail"`
}

// HTTPError is an error with its HTTP status and error code, answered with
// the error body.
type HTTPError struct {
	Status  int
	Code    string
	Message string
}

func (e *HTTPError) Error() string { return e.Message }

func httpError(status int, code, format string, args ...any) *HTTPError {
	return &HTTPError{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

// InvalidInput is answered with 422 and the validation body.
type InvalidInput struct {
	Detail []FieldError
}

func (e *InvalidInput) Error() string {
	msgs := make([]string, len(e.Detail))
	for i, d := range e.Detail {
		msgs[i] = fmt.Sprintf("%v: %s", d.Loc, d.Msg)
	}
	return strings.Join(msgs, "; ")
}

func invalid(typ, msg string, loc ...any) *InvalidInput {
	return &InvalidInput{Detail: []FieldError{{Loc: loc, Msg: msg, Type: typ}}}
}

// ManifestInvalid is a deploy rejected for its manifest: 422 with the error
// body, code VALIDATION_ERROR, every problem in the message.
type ManifestInvalid struct {
	Problems manifests.Problems
	// Limit, when set, is the limit the manifest exceeded: its figures fill
	// the body's limit and requested, and a size limit answers 413.
	Limit *manifests.LimitError
}

func (e *ManifestInvalid) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return "invalid manifest: " + strings.Join(lines, "; ")
}

// writeError is the one mapping from errors to HTTP answers.
func (s *Server) writeError(c *gin.Context, err error) {
	rid := requestID(c)
	body := func(status int, code, msg string) {
		c.AbortWithStatusJSON(status, ErrorBody{Code: code, Message: msg, RequestID: &rid})
	}
	var (
		he  *HTTPError
		ii  *InvalidInput
		mi  *ManifestInvalid
		mbe *http.MaxBytesError
		le  *manifests.LimitError
	)
	switch {
	case errors.As(err, &mi) && mi.Limit != nil:
		s.writeLimit(c, mi.Limit, mi.Error())
	case errors.As(err, &mi):
		body(http.StatusUnprocessableEntity, CodeValidation, mi.Error())
	case errors.As(err, &le):
		s.writeLimit(c, le, le.Error())
	case errors.As(err, &ii):
		c.AbortWithStatusJSON(http.StatusUnprocessableEntity, ValidationBody{Detail: ii.Detail})
	case errors.As(err, &he):
		body(he.Status, he.Code, he.Message)
	case errors.As(err, &mbe):
		var requested *int64
		if n := c.Request.ContentLength; n > mbe.Limit {
			requested = &n
		}
		c.AbortWithStatusJSON(http.StatusRequestEntityTooLarge, ErrorBody{Code: CodeInvalidRequest, RequestID: &rid,
			Message: fmt.Sprintf("request body is larger than %d bytes", mbe.Limit), Limit: &mbe.Limit, Requested: requested})
	case errors.Is(err, store.ErrNotFound):
		body(http.StatusNotFound, CodeNotFound, err.Error())
	case errors.Is(err, store.ErrConflict):
		body(http.StatusConflict, CodeInvalidRequest, err.Error())
	default:
		s.log.ErrorContext(c.Request.Context(), "internal error", slog.String("request_id", rid), slog.String("error", err.Error()))
		body(http.StatusInternalServerError, CodeInternal, "internal error (request "+rid+")")
	}
}

// writeLimit answers an exceeded limit with the error body and its figures:
// 413 when the request is too large as a whole, else 422 VALIDATION_ERROR.
func (s *Server) writeLimit(c *gin.Context, le *manifests.LimitError, msg string) {
	rid := requestID(c)
	status, code := http.StatusUnprocessableEntity, CodeValidation
	if le.TooLarge {
		status, code = http.StatusRequestEntityTooLarge, CodeInvalidRequest
	}
	limit, requested := le.Limit, le.Requested
	c.AbortWithStatusJSON(status, ErrorBody{Code: code, Message: msg, Limit: &limit, Requested: &requested, RequestID: &rid})
}
