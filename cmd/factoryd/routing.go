package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/linefactory/linefactory/manifests/agentconf"
	"github.com/linefactory/linefactory/manifests/inference"
	"github.com/linefactory/linefactory/manifests/run"
	"github.com/linefactory/linefactory/store"
	"github.com/linefactory/linefactory/workflows"
)

// inferenceSettings turns the configuration file's [inference] and
// [router] into the router's and the gateway's settings (nil when neither
// is configured). The upstream key is read here from the variable
// api_key_env names; gatewayURL is where steps reach the gateway.
func inferenceSettings(ac *agentconf.Config, gatewayURL string, logger *slog.Logger) *inference.Config {
	if ac == nil || (ac.Inference == nil && ac.Router == nil) {
		return nil
	}
	inf := &inference.Config{GatewayURL: gatewayURL, Models: map[string]inference.ModelPrice{}}
	if i := ac.Inference; i != nil {
		inf.BaseURL = i.BaseURL
		if i.APIKeyEnv != "" {
			inf.APIKey = os.Getenv(i.APIKeyEnv)
			if inf.APIKey == "" {
				logger.Warn("the variable [inference] api_key_env names is empty: calls go out without a key", slog.String("api_key_env", i.APIKeyEnv))
			}
		}
		for _, m := range i.Models {
			inf.Models[m.Name] = inference.ModelPrice{InputCentsPerMTok: m.InputCentsPerMTok, OutputCentsPerMTok: m.OutputCentsPerMTok}
		}
	}
	if r := ac.Router; r != nil {
		inf.Router = &inference.Router{Model: r.Model, Timeout: r.Timeout, WaitTimeout: r.WaitTimeout}
	}
	return inf
}

// gatewayURL is the inference gateway's base URL for steps: the configured
// one, else the API's listen address (a wildcard host is reached on
// loopback, where the local sandboxes are).
func gatewayURL(configured string, apiAddr net.Addr) string {
	if configured != "" || apiAddr == nil {
		return configured
	}
	host, port, err := net.SplitHostPort(apiAddr.String())
	if err != nil {
		return ""
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/inference/v1"
}

// SelectLineRun answers a waiting line run through its manager's select
// Update; a refusal of its validator comes back as the ApplicationError
// whose type is the failure code.
func (rt *runtime) SelectLineRun(ctx context.Context, runID string, in workflows.SelectInput) (store.LineRun, error) {
	h, err := rt.client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: run.LineRunWorkflowID(runID),
		UpdateName: workflows.SelectUpdate, Args: []any{in}, WaitForStage: client.WorkflowUpdateStageCompleted})
	if err != nil {
		return store.LineRun{}, err
	}
	var out store.LineRun
	err = h.Get(ctx, &out)
	return out, err
}

// registerStatusSearchAttribute makes sure the namespace has the Keyword
// search attribute line runs keep their status in (so the Web UI can list
// waiting runs) and tells whether it has. On an external cluster that
// refuses to add it, runs still carry their status in the memo.
func registerStatusSearchAttribute(ctx context.Context, c client.Client, namespace string, logger *slog.Logger) bool {
	name := workflows.StatusSearchAttribute.GetName()
	ops := c.OperatorService()
	list, err := ops.ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
	if err == nil {
		if _, ok := list.GetCustomAttributes()[name]; ok {
			return true
		}
	}
	_, err = ops.AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{Namespace: namespace,
		SearchAttributes: map[string]enumspb.IndexedValueType{name: enumspb.INDEXED_VALUE_TYPE_KEYWORD}})
	var exists *serviceerror.AlreadyExists
	if err != nil && !errors.As(err, &exists) {
		logger.Warn(fmt.Sprintf("search attribute %s could not be registered; waiting line runs are marked in their memo only", name), slog.String("error", err.Error()))
		return false
	}
	return true
}

// lineRunSearchAttributes are the search attributes a line run starts with.
func (rt *runtime) lineRunSearchAttributes() temporal.SearchAttributes {
	if !rt.statusAttribute {
		return temporal.SearchAttributes{}
	}
	return temporal.NewSearchAttributes(workflows.StatusSearchAttribute.ValueSet(string(run.Running)))
}
