package api

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
)

// DefaultSignatureTolerance is how far an integration event's
// X-Signature-Timestamp may be from the server's clock.
const DefaultSignatureTolerance = 5 * time.Minute

// strictQueryMiddleware rejects a query parameter given more than once
// (limit=1&limit=500): which one counts would be a guess.
func (s *Server) strictQueryMiddleware(c *gin.Context) {
	if c.Request.URL.RawQuery == "" {
		c.Next()
		return
	}
	for k, vs := range c.Request.URL.Query() {
		if len(vs) > 1 {
			s.writeError(c, invalid("repeated_parameter", "query parameter "+k+" is given more than once", "query", k))
			return
		}
	}
	c.Next()
}

// checkSignature checks an integration event's X-Signature-256. Without
// X-Signature-Timestamp it is the HMAC of the raw body; with it (Unix
// seconds) it is the HMAC of "<timestamp>.<raw body>" and the timestamp
// must lie within the tolerance of now, so a captured event cannot be
// replayed later under a new delivery id.
func (s *Server) checkSignature(c *gin.Context, secret string, raw []byte) error {
	mac := hmac.New(sha256.New, []byte(secret))
	if ts := strings.TrimSpace(c.GetHeader("X-Signature-Timestamp")); ts != "" {
		sec, err := strconv.ParseInt(ts, 10, 64)
		if err != nil {
			return httpError(http.StatusUnauthorized, CodeAuthRequired, "X-Signature-Timestamp must be Unix seconds")
		}
		at := time.Unix(sec, 0)
		if d := s.cfg.Now().Sub(at); d > s.cfg.SignatureTolerance || d < -s.cfg.SignatureTolerance {
			return httpError(http.StatusUnauthorized, CodeAuthRequired, "X-Signature-Timestamp is more than %s away from the server's clock", s.cfg.SignatureTolerance)
		}
		mac.Write([]byte(ts + "."))
	}
	mac.Write(raw)
	want := "sha256=" + hex.EncodeToString(mac.Sum(nil))
	if !hmac.Equal([]byte(want), []byte(strings.TrimSpace(c.GetHeader("X-Signature-256")))) {
		return httpError(http.StatusUnauthorized, CodeAuthRequired,
			"X-Signature-256 does not match (sha256=<hex HMAC-SHA256 of the raw body, or of \"<X-Signature-Timestamp>.<raw body>\" when that header is sent>)")
	}
	return nil
}
