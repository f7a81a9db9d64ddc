package activities

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/linefactory/linefactory/manifests"
	"github.com/linefactory/linefactory/manifests/agentconf"
	"github.com/linefactory/linefactory/manifests/inference"
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

// ModelProviderSvcInference is the model_provider of steps that reach
// inference through the service's gateway.
const ModelProviderSvcInference = "svc_inference"

// CodeInferenceUnavailable fails a svc_inference step the gateway cannot
// serve (no [inference] configured).
const CodeInferenceUnavailable = "INFERENCE_NOT_CONFIGURED"

// stepKeyOf names a step in a token record.
func stepKeyOf(task, step string) string { return task + "/" + step }

// stepProvider is the model_provider of a job's run_agent step.
func stepProvider(m *manifests.JobManifest, task, step string) string {
	for _, t := range m.Run.Tasks {
		if t.Name != task {
			continue
		}
		for j, s := range t.Steps {
			if manifests.StepName(t, j) == step && s.RunAgent != nil {
				return s.RunAgent.ModelProvider
			}
		}
	}
	return ""
}

// GatewayCents is the job run's gateway usage in whole cents, rounded up.
func GatewayCents(r *store.JobRun) int64 {
	if r.GatewayUsage == nil {
		return 0
	}
	return agentconf.CentsRoundedUp(r.GatewayUsage.MicroCents)
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
	secret := inference.TokenPrefix + hex.EncodeToString(b[:])
	err := a.InferenceTokens.CreateInferenceToken(ctx, store.InferenceToken{Hash: inference.HashToken(secret), JobRunID: jobRunID, Step: step, CreatedAt: a.now()})
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
