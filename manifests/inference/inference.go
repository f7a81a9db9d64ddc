// Package inference holds the settings of the OpenAI-compatible endpoint
// the server reaches models through (the configuration file's [inference]
// and [router], resolved), their pricing, and the scheme of the inference
// gateway's per-run tokens. The router (activities) and the gateway (api)
// share it.
//
// Invariants:
//   - it is pure: no I/O, no clock, nothing of Linefactory's, so activities
//     and api can both depend on it without depending on each other;
//   - a gateway token is TokenPrefix and random hex; only HashToken of it
//     is ever stored.
package inference

import (
	"crypto/sha256"
	"encoding/hex"
	"math"
	"time"
)

// Config is the OpenAI-compatible endpoint of the server configuration
// ([inference]) with the router ([router]) that decides agentic
// transitions through it: the router's (activities) and the gateway's
// (api) settings. cmd fills it from the configuration file; nil means
// neither is configured.
type Config struct {
	// BaseURL is the endpoint's base, e.g. http://127.0.0.1:8000/v1.
	BaseURL string
	// APIKey is the upstream key (read from the variable api_key_env
	// names); it never reaches a step.
	APIKey string
	// Models are the prices of the models [inference] lists, by name.
	Models map[string]ModelPrice
	// Router is nil without [router]: every agentic transition waits the
	// default wait for a person.
	Router *Router
	// GatewayURL is the base URL steps reach the service's inference
	// gateway at, ending in /inference/v1.
	GatewayURL string
}

// ModelPrice is the price of a million tokens in cents; nil means no price
// (the model costs 0).
type ModelPrice struct {
	InputCentsPerMTok  *float64
	OutputCentsPerMTok *float64
}

// MicroCents prices usage in millionths of a cent, rounded up; ok is false
// for a model without a price.
func (p ModelPrice) MicroCents(input, output int64) (micro int64, ok bool) {
	if p.InputCentsPerMTok == nil && p.OutputCentsPerMTok == nil {
		return 0, false
	}
	var total float64
	if p.InputCentsPerMTok != nil {
		total += float64(input) * *p.InputCentsPerMTok
	}
	if p.OutputCentsPerMTok != nil {
		total += float64(output) * *p.OutputCentsPerMTok
	}
	return int64(math.Ceil(total - 1e-9)), true
}

// Price prices usage of a model at the configured prices.
func (inf *Config) Price(model string, input, output int64) (micro int64, ok bool) {
	if inf == nil {
		return 0, false
	}
	p, listed := inf.Models[model]
	if !listed {
		return 0, false
	}
	return p.MicroCents(input, output)
}

// Router decides agentic transitions.
type Router struct {
	// Model is served by [inference]; empty means only the wait is
	// configured and every agentic transition waits for a person.
	Model string
	// Timeout bounds one call; the call is retried twice.
	Timeout time.Duration
	// WaitTimeout is how long a run waits for a person's select.
	WaitTimeout time.Duration
}

// TokenPrefix starts every gateway token.
const TokenPrefix = "lfi_"

// HashToken is the hex SHA-256 a gateway token is stored under.
func HashToken(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}
