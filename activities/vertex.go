package activities

import (
	"context"
	"fmt"
	"net/http"

	"github.com/anthropics/anthropic-sdk-go/option"
	"github.com/anthropics/anthropic-sdk-go/vertex"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"

	"github.com/agentsaga/agentsaga/agentsagatype"
)

// vertexScope is the OAuth2 scope of the tokens sent to Vertex AI.
const vertexScope = "https://www.googleapis.com/auth/cloud-platform"

// newVertexModel builds a model for spec on Google Cloud's Vertex AI:
// Anthropic's model spec.Name (claude-sonnet-4-5@20250929, say) in region
// spec.Region of project spec.Project, streamed from
// https://REGION-aiplatform.googleapis.com/v1/projects/{project}/locations/{region}/publishers/anthropic/models/{model}:streamRawPredict
// (spec.BaseURL, when set, replaces that root: a Private Service Connect
// endpoint, a test server). Requests carry the Messages API's body
// (anthropic_version vertex-2023-10-16, the model in the path) and are
// decoded as the anthropic provider's are.
//
// Credentials are Google's Application Default Credentials, read on the
// worker: GOOGLE_APPLICATION_CREDENTIALS (a service account's key or a
// workload identity federation file), gcloud auth application-default
// login, or the metadata server of GCE, GKE or Cloud Run; requests carry
// an OAuth2 access token (Authorization: Bearer). model.api_key_env is
// not used. httpClient may be nil to use the SDK's default; the SDK's own
// retries are off.
func newVertexModel(spec agentsagatype.ModelSpec, apiKey string, httpClient *http.Client) (Model, error) {
	if spec.Provider != agentsagatype.ProviderVertex {
		return nil, fmt.Errorf("anthropic-vertex model: provider is %q, want %q", spec.Provider, agentsagatype.ProviderVertex)
	}
	switch {
	case spec.Name == "":
		return nil, fmt.Errorf("anthropic-vertex model: model.name (for example claude-sonnet-4-5@20250929) is empty")
	case spec.Region == "":
		return nil, fmt.Errorf("anthropic-vertex model: model.region (the Google Cloud region, for example us-east5 or global) is empty")
	case spec.Project == "":
		return nil, fmt.Errorf("anthropic-vertex model: model.project (the Google Cloud project) is empty")
	case spec.APIKeyEnv != "" || apiKey != "":
		return nil, fmt.Errorf("anthropic-vertex model: model.api_key_env is not used: credentials are Google's Application Default Credentials")
	}
	creds, err := googleCredentials()
	if err != nil {
		return nil, fmt.Errorf("anthropic-vertex model: no Google Application Default Credentials "+
			"(GOOGLE_APPLICATION_CREDENTIALS, gcloud auth application-default login, or a metadata server): %v", err)
	}
	// Only the token source is handed on, its failures explained.
	creds = &google.Credentials{ProjectID: creds.ProjectID, TokenSource: explainedTokenSource{creds.TokenSource}}
	// The worker's client goes before the Vertex option, which wraps its
	// transport to authorize each request (one after would replace it).
	opts := []option.RequestOption{option.WithoutEnvironmentDefaults(), option.WithMaxRetries(0)}
	if httpClient != nil {
		opts = append(opts, option.WithHTTPClient(httpClient))
	}
	vertexOpt, err := vertexCredentials(spec.Region, spec.Project, creds)
	if err != nil {
		return nil, fmt.Errorf("anthropic-vertex model: %v", err)
	}
	opts = append(opts, vertexOpt)
	if spec.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(spec.BaseURL))
	}
	return newAnthropicModel(spec, "", opts), nil
}

// vertexCredentials is vertex.WithCredentials, its panic (when it cannot
// build its own HTTP client) an error.
func vertexCredentials(region, project string, creds *google.Credentials) (opt option.RequestOption, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("the Vertex AI client cannot be built: %v", p)
		}
	}()
	return vertex.WithCredentials(context.Background(), region, project, creds), nil
}

// googleCredentials are the worker's Application Default Credentials; a
// test puts credentials of its own in their place.
var googleCredentials = defaultGoogleCredentials

var googleADC credentialCache[*google.Credentials]

// defaultGoogleCredentials finds the Application Default Credentials once
// per process: their token source keeps each token until it expires.
// (vertex.WithGoogleAuth would panic on an error.)
func defaultGoogleCredentials() (*google.Credentials, error) {
	return googleADC.get("", func() (*google.Credentials, error) {
		return google.FindDefaultCredentials(context.Background(), vertexScope)
	})
}

// explainedTokenSource says, when no token comes, where it was looked
// for.
type explainedTokenSource struct{ oauth2.TokenSource }

func (s explainedTokenSource) Token() (*oauth2.Token, error) {
	token, err := s.TokenSource.Token()
	if err != nil {
		return nil, fmt.Errorf("anthropic-vertex: no Google access token from the Application Default Credentials: %w", err)
	}
	return token, nil
}
