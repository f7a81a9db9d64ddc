// Package client talks to the Linefactory REST API: JSON requests with a
// bearer token, API errors decoded, and Server-Sent Event log streams. It
// imports nothing of the server, so factoryctl builds in seconds.
package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Client is an API client.
type Client struct {
	BaseURL string
	Token   string
	HTTP    *http.Client
}

// New returns a client of the API at baseURL.
func New(baseURL, token string) *Client {
	return &Client{BaseURL: strings.TrimRight(baseURL, "/"), Token: token, HTTP: &http.Client{}}
}

// FieldError is one entry of a validation body's detail.
type FieldError struct {
	Loc  []any  `json:"loc"`
	Msg  string `json:"msg"`
	Type string `json:"type"`
}

// Error is an API answer with an error status.
type Error struct {
	Status    int
	Code      string       `json:"code"`
	Message   string       `json:"message"`
	RequestID string       `json:"request_id"`
	Detail    []FieldError `json:"detail"`
	// Body is the raw answer when it was no error body.
	Body string
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d", e.Status)
	if e.Code != "" {
		fmt.Fprintf(&b, " %s", e.Code)
	} else if len(e.Detail) > 0 {
		b.WriteString(" invalid input:")
	}
	if e.Message != "" {
		fmt.Fprintf(&b, ": %s", e.Message)
	}
	for _, d := range e.Detail {
		var loc []string
		for _, l := range d.Loc {
			loc = append(loc, fmt.Sprint(l))
		}
		fmt.Fprintf(&b, "\n  %s: %s (%s)", strings.Join(loc, "."), d.Msg, d.Type)
	}
	if e.Code == "" && e.Message == "" && len(e.Detail) == 0 && e.Body != "" {
		fmt.Fprintf(&b, ": %s", strings.TrimSpace(e.Body))
	}
	return b.String()
}

// IsStatus tells an API error with this status.
func IsStatus(err error, status int) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == status
}

// Request is one API call.
type Request struct {
	Method string
	Path   string
	Query  url.Values
	// Body is sent as JSON unless it is a []byte (sent as ContentType).
	Body        any
	ContentType string
	Header      http.Header
}

// Do sends a request and returns the status and body of a 2xx answer;
// other statuses are an *Error.
func (c *Client) Do(ctx context.Context, r Request) (int, []byte, error) {
	resp, err := c.send(ctx, r)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: %w", r.Method, r.Path, err)
	}
	if resp.StatusCode >= 300 {
		return resp.StatusCode, body, decodeError(resp.StatusCode, body)
	}
	return resp.StatusCode, body, nil
}

func (c *Client) send(ctx context.Context, r Request) (*http.Response, error) {
	u := c.BaseURL + r.Path
	if len(r.Query) > 0 {
		u += "?" + r.Query.Encode()
	}
	var body io.Reader
	ct := ""
	switch b := r.Body.(type) {
	case nil:
	case []byte:
		body, ct = bytes.NewReader(b), r.ContentType
	default:
		data, err := json.Marshal(b)
		if err != nil {
			return nil, err
		}
		body, ct = bytes.NewReader(data), "application/json"
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, u, body)
	if err != nil {
		return nil, err
	}
	for k, vs := range r.Header {
		req.Header[k] = vs
	}
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	req.Header.Set("User-Agent", "factoryctl")
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cannot reach the API at %s (set FACTORY_URL or run factoryctl login): %w", c.BaseURL, err)
	}
	return resp, nil
}

func decodeError(status int, body []byte) error {
	e := &Error{Status: status}
	if err := json.Unmarshal(body, e); err != nil {
		e.Body = string(body)
	}
	if e.Code == "" && e.Message == "" && len(e.Detail) == 0 {
		e.Body = string(body)
	}
	return e
}

// JSON sends a request and decodes a 2xx answer into out (unless nil); it
// returns the status.
func (c *Client) JSON(ctx context.Context, r Request, out any) (int, error) {
	status, body, err := c.Do(ctx, r)
	if err != nil {
		return status, err
	}
	if out != nil && len(body) > 0 {
		if err := json.Unmarshal(body, out); err != nil {
			return status, fmt.Errorf("%s %s: decode answer: %w", r.Method, r.Path, err)
		}
	}
	return status, nil
}

// Get decodes a GET answer into out.
func (c *Client) Get(ctx context.Context, path string, q url.Values, out any) error {
	_, err := c.JSON(ctx, Request{Method: http.MethodGet, Path: path, Query: q}, out)
	return err
}

// Event is one Server-Sent Event.
type Event struct {
	ID    string
	Event string
	Data  string
}

// Stream follows a Server-Sent Event stream at path until it sends an
// "end" event (returned) or ctx ends. A dropped connection is resumed with
// Last-Event-ID after a short pause.
func (c *Client) Stream(ctx context.Context, path string, q url.Values, on func(Event)) (Event, error) {
	last := ""
	for attempt := 0; ; attempt++ {
		h := http.Header{"Accept": {"text/event-stream"}}
		if last != "" {
			h.Set("Last-Event-ID", last)
		}
		resp, err := c.send(ctx, Request{Method: http.MethodGet, Path: path, Query: q, Header: h})
		if err == nil && resp.StatusCode >= 300 {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return Event{}, decodeError(resp.StatusCode, body)
		}
		if err == nil {
			end, done, rerr := readEvents(resp.Body, func(ev Event) {
				if ev.ID != "" {
					last = ev.ID
				}
				on(ev)
			})
			resp.Body.Close()
			if done {
				return end, nil
			}
			err = rerr
		}
		if ctx.Err() != nil {
			return Event{}, ctx.Err()
		}
		if attempt >= 30 {
			return Event{}, fmt.Errorf("log stream %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			return Event{}, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// readEvents parses an event stream; done tells that it saw "end".
func readEvents(r io.Reader, on func(Event)) (Event, bool, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var ev Event
	var data []string
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			if ev.Event != "" || len(data) > 0 {
				ev.Data = strings.Join(data, "\n")
				if ev.Event == "end" {
					return ev, true, nil
				}
				on(ev)
			}
			ev, data = Event{}, nil
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "id":
			ev.ID = value
		case "event":
			ev.Event = value
		case "data":
			data = append(data, value)
		}
	}
	err := sc.Err()
	if err == nil {
		err = io.ErrUnexpectedEOF
	}
	return Event{}, false, err
}

// Query builds query values, leaving out empty ones.
func Query(kv ...string) url.Values {
	q := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			q.Set(kv[i], kv[i+1])
		}
	}
	return q
}

// Itoa is strconv.Itoa for query values.
func Itoa(n int) string { return strconv.Itoa(n) }
