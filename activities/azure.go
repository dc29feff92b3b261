package activities

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/openai/openai-go/v3/azure"
	"github.com/openai/openai-go/v3/option"

	"github.com/agentsaga/agentsaga/agentsagatype"
)

// newAzureModel builds a model for spec on Azure OpenAI: the Chat
// Completions API of the deployment spec.Name at the resource endpoint
// spec.BaseURL (https://RESOURCE.openai.azure.com), with api-version
// spec.APIVersion. Requests go to
// {endpoint}/openai/deployments/{deployment}/chat/completions?api-version=...
// and are decoded as the openai provider's are.
//
// With an apiKey (spec.APIKeyEnv names the variable the worker read it
// from) requests carry it in the api-key header. Without one (no
// api_key_env) they carry an Entra ID token (Authorization: Bearer) from
// the worker's DefaultAzureCredential: the AZURE_TENANT_ID,
// AZURE_CLIENT_ID and AZURE_CLIENT_SECRET (or _CERTIFICATE_PATH)
// variables, workload identity, a managed identity, or the Azure CLI's
// login. httpClient may be nil to use the SDK's default; the SDK's own
// retries are off, as for every provider.
func newAzureModel(spec agentsagatype.ModelSpec, apiKey string, httpClient *http.Client) (Model, error) {
	if spec.Provider != agentsagatype.ProviderAzure {
		return nil, fmt.Errorf("azure model: provider is %q, want %q", spec.Provider, agentsagatype.ProviderAzure)
	}
	switch {
	case spec.Name == "":
		return nil, fmt.Errorf("azure model: model.name (the deployment's name) is empty")
	case spec.BaseURL == "":
		return nil, fmt.Errorf("azure model: model.base_url (the resource's endpoint, https://RESOURCE.openai.azure.com) is empty")
	case spec.APIVersion == "":
		return nil, fmt.Errorf("azure model: model.api_version (for example 2024-10-21) is empty")
	case spec.APIKeyEnv != "" && apiKey == "":
		return nil, fmt.Errorf("azure model: no API key was read from %s (model.api_key_env); leave api_key_env out to use an Entra ID token instead", spec.APIKeyEnv)
	}
	endpoint, err := url.Parse(spec.BaseURL)
	if err != nil || endpoint.Host == "" || (endpoint.Scheme != "https" && endpoint.Scheme != "http") {
		return nil, fmt.Errorf("azure model: model.base_url %q is not an endpoint like https://RESOURCE.openai.azure.com", spec.BaseURL)
	}
	if strings.Contains(endpoint.Path, "/openai") {
		return nil, fmt.Errorf("azure model: model.base_url %q holds a path with /openai: it is the resource's endpoint alone (https://RESOURCE.openai.azure.com), and the deployment goes in model.name", spec.BaseURL)
	}
	opts := []option.RequestOption{
		option.WithMaxRetries(0),
		azure.WithEndpoint(spec.BaseURL, spec.APIVersion),
	}
	if apiKey != "" {
		opts = append(opts, azure.WithAPIKey(apiKey))
	} else {
		cred, err := azureTokenCredential()
		if err != nil {
			return nil, fmt.Errorf("azure model: model.api_key_env is empty, so an Entra ID token is used, but DefaultAzureCredential cannot be built: %v", err)
		}
		opts = append(opts, azure.WithTokenCredential(cred))
	}
	if httpClient != nil {
		opts = append(opts, option.WithHTTPClient(httpClient))
	}
	return newOpenAIModel(spec, apiKey, opts), nil
}

// azureTokenCredential is the worker's Entra ID credential; a test puts
// a credential of its own in its place.
var azureTokenCredential = defaultAzureCredential

var azureCredentials credentialCache[azcore.TokenCredential]

// defaultAzureCredential is DefaultAzureCredential, built once per process
// (it keeps its tokens until they expire), its failures to find a token
// explained.
func defaultAzureCredential() (azcore.TokenCredential, error) {
	return azureCredentials.get("", func() (azcore.TokenCredential, error) {
		cred, err := azidentity.NewDefaultAzureCredential(nil)
		if err != nil {
			return nil, err
		}
		return explainedAzureCredential{cred}, nil
	})
}

// explainedAzureCredential says, when no token comes, what was being
// looked for; the credential's own error lists what it tried.
type explainedAzureCredential struct{ azcore.TokenCredential }

func (c explainedAzureCredential) GetToken(ctx context.Context, opts policy.TokenRequestOptions) (azcore.AccessToken, error) {
	token, err := c.TokenCredential.GetToken(ctx, opts)
	if err != nil {
		return token, fmt.Errorf("azure: no Entra ID token from DefaultAzureCredential (model.api_key_env is empty; set it to use an API key instead): %w", err)
	}
	return token, nil
}
