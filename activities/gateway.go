package activities

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/linefactory/linefactory/store"
)

// InferenceTokens keeps the inference gateway's per-run tokens (hashed).
type InferenceTokens interface {
	CreateInferenceToken(ctx context.Context, t store.InferenceToken) error
}

// Variables a model_provider = "svc_inference" step gets.
const (
	EnvInferenceBaseURL = "SVC_INFERENCE_BASE_URL"
	EnvInferenceToken   = "SVC_INFERENCE_TOKEN"
	EnvOpenAIBaseURL    = "OPENAI_BASE_URL"
	EnvOpenAIAPIKey     = "OPENAI_API_KEY"
)

// InferenceTokenPrefix starts every gateway token.
const InferenceTokenPrefix = "lfi_"

// HashInferenceToken is the hex SHA-256 a gateway token is stored under.
func HashInferenceToken(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// InferenceStepEnv mints a gateway token for a step of a job run (only its
// hash is stored) and returns the variables of a model_provider =
// "svc_inference" step: the gateway's URL and the token, also under the
// names OpenAI clients read. The token works while the job run has not
// ended; the upstream key is never among them.
func (a *Activities) InferenceStepEnv(ctx context.Context, jobRunID, step string) (map[string]string, error) {
	if a.Inference == nil || a.Inference.BaseURL == "" {
		return nil, errors.New(`model_provider "svc_inference" needs [inference] in the server configuration`)
	}
	if a.Inference.GatewayURL == "" || a.InferenceTokens == nil {
		return nil, errors.New("the inference gateway is not served by this server")
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	secret := InferenceTokenPrefix + hex.EncodeToString(b[:])
	err := a.InferenceTokens.CreateInferenceToken(ctx, store.InferenceToken{Hash: HashInferenceToken(secret), JobRunID: jobRunID, Step: step, CreatedAt: a.now()})
	if err != nil {
		return nil, fmt.Errorf("mint inference token: %w", err)
	}
	return map[string]string{
		EnvInferenceBaseURL: a.Inference.GatewayURL,
		EnvInferenceToken:   secret,
		EnvOpenAIBaseURL:    a.Inference.GatewayURL,
		EnvOpenAIAPIKey:     secret,
	}, nil
}
