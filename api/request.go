package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"
)

// Page bounds (API.md "Pagination").
const (
	DefaultLimit = 50
	MaxLimit     = 200
)

// page reads limit and offset from the query.
func page(c *gin.Context) (limit, offset int, err error) {
	limit, offset = DefaultLimit, 0
	if raw, ok := c.GetQuery("limit"); ok {
		n, err := strconv.Atoi(raw)
		switch {
		case err != nil:
			return 0, 0, invalid("int_parsing", "limit must be an integer", "query", "limit")
		case n < 1 || n > MaxLimit:
			return 0, 0, invalid("range_error", fmt.Sprintf("limit must be between 1 and %d", MaxLimit), "query", "limit")
		}
		limit = n
	}
	if raw, ok := c.GetQuery("offset"); ok {
		n, err := strconv.Atoi(raw)
		switch {
		case err != nil:
			return 0, 0, invalid("int_parsing", "offset must be an integer", "query", "offset")
		case n < 0:
			return 0, 0, invalid("range_error", "offset must be 0 or more", "query", "offset")
		}
		offset = n
	}
	return limit, offset, nil
}

// readBody reads the request body, which the body-size middleware bounds.
func readBody(c *gin.Context) ([]byte, error) {
	data, err := io.ReadAll(c.Request.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, mbe
		}
		return nil, httpError(http.StatusBadRequest, CodeInvalidRequest, "reading request body: %v", err)
	}
	return data, nil
}

// bindJSON decodes a JSON request body strictly into dst: malformed JSON,
// unknown fields and wrong types are answered with 422 and their location.
// An empty body decodes as {}.
func bindJSON(c *gin.Context, dst any) error {
	data, err := readBody(c)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(data)) == 0 {
		data = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return jsonInvalid(err)
	}
	if dec.More() {
		return invalid("json_invalid", "unexpected data after the JSON body", "body")
	}
	return nil
}

func jsonInvalid(err error) *InvalidInput {
	var (
		te *json.UnmarshalTypeError
		se *json.SyntaxError
	)
	switch {
	case errors.As(err, &te):
		loc := []any{"body"}
		for _, p := range strings.Split(te.Field, ".") {
			if p != "" {
				loc = append(loc, p)
			}
		}
		return &InvalidInput{Detail: []FieldError{{Loc: loc, Msg: fmt.Sprintf("expected %s, got %s", te.Type, te.Value), Type: "type_error"}}}
	case errors.As(err, &se):
		return invalid("json_invalid", "malformed JSON: "+se.Error(), "body")
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return invalid("extra_forbidden", "unknown field", "body", field)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return invalid("json_invalid", "malformed JSON: unexpected end of input", "body")
	}
	return invalid("json_invalid", "malformed JSON: "+err.Error(), "body")
}

// missing collects required body fields that are absent.
type fieldCheck struct{ detail []FieldError }

func (f *fieldCheck) require(ok bool, field string) {
	if !ok {
		f.detail = append(f.detail, FieldError{Loc: []any{"body", field}, Msg: "field required", Type: "missing"})
	}
}

func (f *fieldCheck) add(field, typ, msg string, input any) {
	f.detail = append(f.detail, FieldError{Loc: []any{"body", field}, Msg: msg, Type: typ, Input: input})
}

func (f *fieldCheck) err() error {
	if len(f.detail) == 0 {
		return nil
	}
	return &InvalidInput{Detail: f.detail}
}
