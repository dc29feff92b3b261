package activities

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/agentsagatype"
)

const (
	azureTestKey        = "azure-key-0123456789abcdef"
	azureTestDeployment = "my-gpt-4o"
	azureTestAPIVersion = "2024-10-21"
)

// azureRequest is what the fake Azure OpenAI resource saw of a request.
type azureRequest struct {
	method, path, rawQuery string
	apiVersion             string
	apiKey, authorization  string
	body                   []byte
}

// azureServer is a fake Azure OpenAI resource over TLS (the SDK sends
// Azure credentials over HTTPS only). It answers every request with
// status and body, and keeps the last request it saw.
type azureServer struct {
	*httptest.Server
	requests atomic.Int32
	last     atomic.Pointer[azureRequest]
}

func newAzureServer(t *testing.T, status int, body string) *azureServer {
	t.Helper()
	as := &azureServer{}
	as.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		as.requests.Add(1)
		b, _ := io.ReadAll(r.Body)
		as.last.Store(&azureRequest{method: r.Method, path: r.URL.Path, rawQuery: r.URL.RawQuery,
			apiVersion: r.URL.Query().Get("api-version"), apiKey: r.Header.Get("Api-Key"),
			authorization: r.Header.Get("Authorization"), body: b})
		if status != http.StatusOK {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_, _ = io.WriteString(w, body)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(as.Close)
	return as
}

func azureSpec(endpoint string) agentsagatype.ModelSpec {
	return agentsagatype.ModelSpec{Provider: agentsagatype.ProviderAzure, Name: azureTestDeployment,
		BaseURL: endpoint, APIKeyEnv: "AZURE_OPENAI_API_KEY", APIVersion: azureTestAPIVersion}
}

func newAzureTestModel(t *testing.T, as *azureServer, spec agentsagatype.ModelSpec, apiKey string) Model {
	t.Helper()
	client := as.Client()
	client.Timeout = 10 * time.Second
	m, err := builtinModels().build(spec, apiKey, client)
	require.NoError(t, err)
	return m
}

// sse is a stream of data: lines, each followed by a blank line.
func sse(lines ...string) string {
	var b strings.Builder
	for _, line := range lines {
		b.WriteString("data: " + line + "\n\n")
	}
	return b.String()
}

// azurePromptFilterChunk is the chunk Azure OpenAI streams first: no
// choices, no id, the content filter's verdict on the prompt.
const azurePromptFilterChunk = `{"choices":[],"created":0,"id":"","model":"","object":"","prompt_filter_results":[{"prompt_index":0,"content_filter_results":{"hate":{"filtered":false,"severity":"safe"},"jailbreak":{"filtered":false,"detected":false},"self_harm":{"filtered":false,"severity":"safe"},"sexual":{"filtered":false,"severity":"safe"},"violence":{"filtered":false,"severity":"safe"}}}]}`

// azureChunk is a chunk of the completion, with Azure's
// content_filter_results on its choice.
func azureChunk(delta, finish string) string {
	if finish == "" {
		finish = "null"
	} else {
		finish = `"` + finish + `"`
	}
	return `{"choices":[{"content_filter_results":{"hate":{"filtered":false,"severity":"safe"},"self_harm":{"filtered":false,"severity":"safe"},"sexual":{"filtered":false,"severity":"safe"},"violence":{"filtered":false,"severity":"safe"}},"delta":` +
		delta + `,"finish_reason":` + finish + `,"index":0,"logprobs":null}],"created":1730000000,"id":"chatcmpl-AZ1","model":"gpt-4o-2024-08-06","object":"chat.completion.chunk","system_fingerprint":"fp_azure"}`
}

const azureUsageChunk = `{"choices":[],"created":1730000000,"id":"chatcmpl-AZ1","model":"gpt-4o-2024-08-06","object":"chat.completion.chunk","system_fingerprint":"fp_azure","usage":{"prompt_tokens":21,"completion_tokens":9,"total_tokens":30,"prompt_tokens_details":{"cached_tokens":4}}}`

func azureAnswer() string {
	return sse(azurePromptFilterChunk,
		azureChunk(`{"content":"","refusal":null,"role":"assistant"}`, ""),
		azureChunk(`{"content":"Hello "}`, ""),
		azureChunk(`{"content":"from Azure."}`, ""),
		azureChunk(`{"tool_calls":[{"index":0,"id":"call_az1","type":"function","function":{"name":"lookup","arguments":""}}]}`, ""),
		azureChunk(`{"tool_calls":[{"index":0,"function":{"arguments":"{\"q\":"}}]}`, ""),
		azureChunk(`{"tool_calls":[{"index":0,"function":{"arguments":"\"x\"}"}}]}`, ""),
		azureChunk(`{}`, "tool_calls"),
		azureUsageChunk,
		"[DONE]")
}

func userAsksAzure() ModelRequest {
	return ModelRequest{Messages: []agentsagatype.Message{{Role: "user", Content: "hi"}}}
}

func TestAzureModelAPIKeyHitsTheDeploymentPath(t *testing.T) {
	// The OpenAI SDK's own variables must not reach an Azure request.
	t.Setenv("OPENAI_API_KEY", "sk-from-the-environment")
	t.Setenv("OPENAI_BASE_URL", "https://elsewhere.invalid/v1")
	as := newAzureServer(t, http.StatusOK, azureAnswer())
	m := newAzureTestModel(t, as, azureSpec(as.URL), azureTestKey)
	var streamed strings.Builder
	req := userAsksAzure()
	req.OnText = func(s string) { streamed.WriteString(s) }
	turn, err := m.Turn(context.Background(), req)
	require.NoError(t, err)

	got := as.last.Load()
	require.NotNil(t, got)
	assert.Equal(t, http.MethodPost, got.method)
	assert.Equal(t, "/openai/deployments/"+azureTestDeployment+"/chat/completions", got.path)
	assert.Equal(t, azureTestAPIVersion, got.apiVersion, "query %q", got.rawQuery)
	assert.Equal(t, azureTestKey, got.apiKey, "the key goes in the api-key header")
	assert.Empty(t, got.authorization, "no Authorization header beside the api-key")
	assert.Contains(t, string(got.body), `"stream":true`)
	assert.Equal(t, int32(1), as.requests.Load())

	assert.Equal(t, "Hello from Azure.", turn.Content)
	assert.Equal(t, "Hello from Azure.", streamed.String())
	assert.Empty(t, turn.Refusal)
	assert.Equal(t, "gpt-4o-2024-08-06", turn.Model)
	assert.Equal(t, agentsagatype.Usage{InputTokens: 21, OutputTokens: 9, CachedInputTokens: 4}, turn.Usage)
	require.Len(t, turn.ToolCalls, 1)
	assert.Equal(t, agentsagatype.ToolCall{ID: "call_az1", Name: "lookup", Arguments: `{"q":"x"}`}, turn.ToolCalls[0])
}

// A reply the content filter stopped ends with finish_reason
// content_filter (after the prompt_filter_results chunk, and maybe some
// text): the turn is a refusal, not an answer cut short.
func TestAzureModelContentFilterIsARefusal(t *testing.T) {
	as := newAzureServer(t, http.StatusOK, sse(azurePromptFilterChunk,
		azureChunk(`{"content":"","role":"assistant"}`, ""),
		azureChunk(`{"content":"Here is how"}`, ""),
		`{"choices":[{"content_filter_results":{"violence":{"filtered":true,"severity":"high"}},"delta":{},"finish_reason":"content_filter","index":0,"logprobs":null}],"created":1730000000,"id":"chatcmpl-AZ1","model":"gpt-4o-2024-08-06","object":"chat.completion.chunk"}`,
		azureUsageChunk,
		"[DONE]"))
	m := newAzureTestModel(t, as, azureSpec(as.URL), azureTestKey)
	turn, err := m.Turn(context.Background(), userAsksAzure())
	require.NoError(t, err, "the chunks decode: prompt_filter_results and content_filter_results are extra fields")
	assert.Equal(t, agentsagatype.Usage{InputTokens: 21, OutputTokens: 9, CachedInputTokens: 4}, turn.Usage)
	assert.Empty(t, turn.Content, "a filtered reply is no answer")
	assert.NotEmpty(t, turn.Refusal)
}

// A prompt the content filter refuses is a 400 before any stream: an
// HTTPError, not retryable.
func TestAzureModelFilteredPromptIsABadRequest(t *testing.T) {
	as := newAzureServer(t, http.StatusBadRequest, `{"error":{"message":"The response was filtered due to the prompt triggering Azure OpenAI's content management policy.","type":null,"param":"prompt","code":"content_filter","status":400}}`)
	m := newAzureTestModel(t, as, azureSpec(as.URL), azureTestKey)
	_, err := m.Turn(context.Background(), userAsksAzure())
	var httpErr *HTTPError
	require.ErrorAs(t, err, &httpErr)
	assert.Equal(t, http.StatusBadRequest, httpErr.StatusCode)
	assert.Contains(t, httpErr.Body, "content_filter")
	assert.False(t, classify(err).retryable)
}

func TestAzureModelKeyNeverInErrors(t *testing.T) {
	as := newAzureServer(t, http.StatusUnauthorized, `{"error":{"code":"401","message":"Access denied due to invalid subscription key `+azureTestKey+`."}}`)
	m := newAzureTestModel(t, as, azureSpec(as.URL), azureTestKey)
	_, err := m.Turn(context.Background(), userAsksAzure())
	require.Error(t, err)
	assert.NotContains(t, err.Error(), azureTestKey)
	var httpErr *HTTPError
	require.ErrorAs(t, err, &httpErr)
	assert.Equal(t, http.StatusUnauthorized, httpErr.StatusCode)
	assert.NotContains(t, httpErr.Body, azureTestKey)
	assert.Equal(t, int32(1), as.requests.Load(), "no SDK retry")
}

func TestAzureModelNoSDKRetry(t *testing.T) {
	as := newAzureServer(t, http.StatusServiceUnavailable, `{"error":{"code":"503","message":"busy"}}`)
	m := newAzureTestModel(t, as, azureSpec(as.URL), azureTestKey)
	_, err := m.Turn(context.Background(), userAsksAzure())
	var httpErr *HTTPError
	require.ErrorAs(t, err, &httpErr)
	assert.Equal(t, int32(1), as.requests.Load())
}

// fakeTokenCredential is an Entra ID credential that hands out token, or
// fails with err.
type fakeTokenCredential struct {
	token  string
	err    error
	scopes atomic.Pointer[[]string]
}

func (c *fakeTokenCredential) GetToken(_ context.Context, opts policy.TokenRequestOptions) (azcore.AccessToken, error) {
	c.scopes.Store(&opts.Scopes)
	if c.err != nil {
		return azcore.AccessToken{}, c.err
	}
	return azcore.AccessToken{Token: c.token, ExpiresOn: time.Now().Add(time.Hour)}, nil
}

func withAzureCredential(t *testing.T, cred azcore.TokenCredential) {
	t.Helper()
	saved := azureTokenCredential
	azureTokenCredential = func() (azcore.TokenCredential, error) { return explainedAzureCredential{cred}, nil }
	t.Cleanup(func() { azureTokenCredential = saved })
}

// Without api_key_env the request carries an Entra ID token from
// DefaultAzureCredential (here a fake in its place), and no api-key.
func TestAzureModelEntraIDToken(t *testing.T) {
	cred := &fakeTokenCredential{token: "entra-access-token"}
	withAzureCredential(t, cred)
	as := newAzureServer(t, http.StatusOK, azureAnswer())
	spec := azureSpec(as.URL)
	spec.APIKeyEnv = ""
	m := newAzureTestModel(t, as, spec, "")
	turn, err := m.Turn(context.Background(), userAsksAzure())
	require.NoError(t, err)
	assert.Equal(t, "Hello from Azure.", turn.Content)
	got := as.last.Load()
	require.NotNil(t, got)
	assert.Equal(t, "/openai/deployments/"+azureTestDeployment+"/chat/completions", got.path)
	assert.Equal(t, azureTestAPIVersion, got.apiVersion)
	assert.Equal(t, "Bearer entra-access-token", got.authorization)
	assert.Empty(t, got.apiKey)
	scopes := cred.scopes.Load()
	require.NotNil(t, scopes)
	assert.Equal(t, []string{"https://cognitiveservices.azure.com/.default"}, *scopes)
}

func TestAzureModelEntraIDNoToken(t *testing.T) {
	withAzureCredential(t, &fakeTokenCredential{err: errors.New("EnvironmentCredential: missing environment variable AZURE_TENANT_ID")})
	as := newAzureServer(t, http.StatusOK, azureAnswer())
	spec := azureSpec(as.URL)
	spec.APIKeyEnv = ""
	m := newAzureTestModel(t, as, spec, "")
	_, err := m.Turn(context.Background(), userAsksAzure())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no Entra ID token from DefaultAzureCredential")
	assert.Contains(t, err.Error(), "AZURE_TENANT_ID")
	assert.True(t, classify(err).retryable)
	assert.Equal(t, int32(0), as.requests.Load(), "nothing is sent without a token")
}

// The SDK sends Azure credentials over HTTPS only.
func TestAzureModelRefusesPlainHTTP(t *testing.T) {
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { requests.Add(1) }))
	t.Cleanup(srv.Close)
	m, err := newAzureModel(azureSpec(srv.URL), azureTestKey, &http.Client{Timeout: 10 * time.Second})
	require.NoError(t, err)
	_, err = m.Turn(context.Background(), userAsksAzure())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "HTTPS")
	assert.NotContains(t, err.Error(), azureTestKey)
	assert.Equal(t, int32(0), requests.Load())
}

func TestNewAzureModelSaysWhatIsMissing(t *testing.T) {
	ok := azureSpec("https://res.openai.azure.com")
	for name, tc := range map[string]struct {
		edit   func(*agentsagatype.ModelSpec)
		apiKey string
		want   string
	}{
		"deployment":  {func(s *agentsagatype.ModelSpec) { s.Name = "" }, azureTestKey, "model.name"},
		"endpoint":    {func(s *agentsagatype.ModelSpec) { s.BaseURL = "" }, azureTestKey, "model.base_url"},
		"api version": {func(s *agentsagatype.ModelSpec) { s.APIVersion = "" }, azureTestKey, "model.api_version"},
		"key":         {func(*agentsagatype.ModelSpec) {}, "", "AZURE_OPENAI_API_KEY"},
		"bad url":     {func(s *agentsagatype.ModelSpec) { s.BaseURL = "res.openai.azure.com" }, azureTestKey, "model.base_url"},
		"openai path": {func(s *agentsagatype.ModelSpec) { s.BaseURL = "https://res.openai.azure.com/openai/deployments/x" }, azureTestKey, "/openai"},
		"provider":    {func(s *agentsagatype.ModelSpec) { s.Provider = agentsagatype.ProviderOpenAI }, azureTestKey, `want "azure"`},
	} {
		t.Run(name, func(t *testing.T) {
			spec := ok
			tc.edit(&spec)
			_, err := newAzureModel(spec, tc.apiKey, nil)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.NotContains(t, err.Error(), azureTestKey)
		})
	}
	_, err := newAzureModel(ok, azureTestKey, nil)
	require.NoError(t, err)
}
