package activities

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"

	"github.com/agentsaga/agentsaga/agentsagatype"
)

const (
	vertexTestModel   = "claude-sonnet-4-5@20250929"
	vertexTestRegion  = "us-east5"
	vertexTestProject = "acme-agents-prod"
	vertexTestToken   = "ya29.vertex-test-access-token"
)

// vertexRequest is what the fake Vertex AI endpoint saw of a request.
type vertexRequest struct {
	method, path string
	header       http.Header
	body         []byte
}

// vertexServer is a fake Vertex AI endpoint. A 200 answers with events,
// as server-sent events named by their type (Anthropic's stream, which
// streamRawPredict passes through); any other status with body as JSON.
type vertexServer struct {
	URL      string
	requests atomic.Int32
	last     atomic.Pointer[vertexRequest]
}

func newVertexServer(t *testing.T, status int, events []string, body string) *vertexServer {
	t.Helper()
	vs := &vertexServer{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		vs.requests.Add(1)
		b, _ := io.ReadAll(r.Body)
		vs.last.Store(&vertexRequest{method: r.Method, path: r.URL.Path, header: r.Header.Clone(), body: b})
		if status != http.StatusOK {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_, _ = io.WriteString(w, body)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for _, event := range events {
			var head struct {
				Type string `json:"type"`
			}
			if err := json.Unmarshal([]byte(event), &head); err != nil {
				t.Errorf("vertex server: event %s: %v", event, err)
				return
			}
			_, _ = io.WriteString(w, "event: "+head.Type+"\ndata: "+event+"\n\n")
		}
	}))
	t.Cleanup(srv.Close)
	vs.URL = srv.URL
	return vs
}

// withGoogleTokenSource puts credentials whose tokens come from source in
// place of the Application Default Credentials, which cannot reach Google
// here.
func withGoogleTokenSource(t *testing.T, source oauth2.TokenSource) {
	t.Helper()
	// The first-party SDK's variables must not reach a Vertex request.
	t.Setenv("ANTHROPIC_API_KEY", "sk-ant-from-the-environment")
	t.Setenv("ANTHROPIC_BASE_URL", "https://elsewhere.invalid")
	saved := googleCredentials
	googleCredentials = func() (*google.Credentials, error) {
		return &google.Credentials{ProjectID: "some-other-project", TokenSource: source}, nil
	}
	t.Cleanup(func() { googleCredentials = saved })
}

func staticGoogleToken() oauth2.TokenSource {
	return oauth2.StaticTokenSource(&oauth2.Token{AccessToken: vertexTestToken, TokenType: "Bearer", Expiry: time.Now().Add(time.Hour)})
}

func vertexSpec(baseURL string) agentsagatype.ModelSpec {
	return agentsagatype.ModelSpec{Provider: agentsagatype.ProviderVertex, Name: vertexTestModel, Region: vertexTestRegion,
		Project: vertexTestProject, BaseURL: baseURL, MaxTokens: 2048}
}

func TestVertexModelStreamRawPredictWithABearerToken(t *testing.T) {
	withGoogleTokenSource(t, staticGoogleToken())
	vs := newVertexServer(t, http.StatusOK, anthropicTextAndToolEvents, "")
	// The worker's client is wrapped to authorize, and so is the SDK's
	// default one.
	for name, client := range map[string]*http.Client{"worker's client": {Timeout: 10 * time.Second}, "default client": nil} {
		t.Run(name, func(t *testing.T) {
			m, err := builtinModels().build(vertexSpec(vs.URL), "", client)
			require.NoError(t, err)
			var streamed strings.Builder
			req := ModelRequest{Messages: []agentsagatype.Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "hi"}},
				Tools:  []agentsagatype.ToolDef{{Name: "lookup"}},
				OnText: func(s string) { streamed.WriteString(s) }}
			turn, err := m.Turn(context.Background(), req)
			require.NoError(t, err)

			got := vs.last.Load()
			require.NotNil(t, got)
			assert.Equal(t, http.MethodPost, got.method)
			assert.Equal(t, "/v1/projects/"+vertexTestProject+"/locations/"+vertexTestRegion+
				"/publishers/anthropic/models/"+vertexTestModel+":streamRawPredict", got.path)
			assert.Equal(t, "Bearer "+vertexTestToken, got.header.Get("Authorization"))
			assert.Empty(t, got.header.Get("X-Api-Key"), "no first-party key from the environment")
			var body map[string]any
			require.NoError(t, json.Unmarshal(got.body, &body))
			assert.Equal(t, "vertex-2023-10-16", body["anthropic_version"])
			assert.NotContains(t, body, "model", "the model is in the path")
			assert.Equal(t, true, body["stream"])
			assert.EqualValues(t, 2048, body["max_tokens"])
			assert.NotEmpty(t, body["messages"])
			assert.NotEmpty(t, body["tools"])

			assert.Equal(t, "Hello from the cloud.", turn.Content)
			assert.Equal(t, "Hello from the cloud.", streamed.String())
			assert.Equal(t, agentsagatype.Usage{InputTokens: 30, OutputTokens: 17, CachedInputTokens: 5}, turn.Usage)
			require.Len(t, turn.ToolCalls, 1)
			assert.Equal(t, agentsagatype.ToolCall{ID: "toolu_cloud_1", Name: "lookup", Arguments: `{"q":"x"}`}, turn.ToolCalls[0])
		})
	}
}

func TestVertexModelHTTPErrorNoSDKRetry(t *testing.T) {
	withGoogleTokenSource(t, staticGoogleToken())
	vs := newVertexServer(t, http.StatusTooManyRequests, nil, `{"error":{"code":429,"message":"Quota exceeded for aiplatform.googleapis.com/online_prediction_requests_per_base_model","status":"RESOURCE_EXHAUSTED"}}`)
	m, err := builtinModels().build(vertexSpec(vs.URL), "", &http.Client{Timeout: 10 * time.Second})
	require.NoError(t, err)
	_, err = m.Turn(context.Background(), ModelRequest{Messages: []agentsagatype.Message{{Role: "user", Content: "hi"}}})
	var httpErr *HTTPError
	require.ErrorAs(t, err, &httpErr)
	assert.Equal(t, http.StatusTooManyRequests, httpErr.StatusCode)
	assert.True(t, classify(err).retryable)
	assert.Equal(t, int32(1), vs.requests.Load())
	assert.NotContains(t, err.Error(), vertexTestToken)
}

type failingTokenSource struct{}

func (failingTokenSource) Token() (*oauth2.Token, error) {
	return nil, errors.New(`oauth2: "invalid_grant" "Invalid JWT Signature."`)
}

func TestVertexModelNoToken(t *testing.T) {
	withGoogleTokenSource(t, failingTokenSource{})
	vs := newVertexServer(t, http.StatusOK, anthropicTextAndToolEvents, "")
	m, err := builtinModels().build(vertexSpec(vs.URL), "", &http.Client{Timeout: 10 * time.Second})
	require.NoError(t, err)
	_, err = m.Turn(context.Background(), ModelRequest{Messages: []agentsagatype.Message{{Role: "user", Content: "hi"}}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no Google access token from the Application Default Credentials")
	assert.Contains(t, err.Error(), "invalid_grant")
	assert.True(t, classify(err).retryable)
	assert.Equal(t, int32(0), vs.requests.Load())
}

// Without Application Default Credentials the model is not built, and the
// error says where they were looked for.
func TestVertexModelNoApplicationDefaultCredentials(t *testing.T) {
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", t.TempDir()+"/no-such-key.json")
	saved := googleADC.loaded
	googleADC.loaded = nil
	t.Cleanup(func() { googleADC.loaded = saved })
	_, err := newVertexModel(vertexSpec(""), "", nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no Google Application Default Credentials")
	assert.Contains(t, err.Error(), "no-such-key.json")
	assert.Empty(t, googleADC.loaded, "a failed load is not kept")
}

func TestNewVertexModelSaysWhatIsMissing(t *testing.T) {
	withGoogleTokenSource(t, staticGoogleToken())
	ok := vertexSpec("")
	for name, tc := range map[string]struct {
		edit func(*agentsagatype.ModelSpec)
		want string
	}{
		"model":       {func(s *agentsagatype.ModelSpec) { s.Name = "" }, "model.name"},
		"region":      {func(s *agentsagatype.ModelSpec) { s.Region = "" }, "model.region"},
		"project":     {func(s *agentsagatype.ModelSpec) { s.Project = "" }, "model.project"},
		"api key env": {func(s *agentsagatype.ModelSpec) { s.APIKeyEnv = "SOME_KEY" }, "model.api_key_env is not used"},
		"provider":    {func(s *agentsagatype.ModelSpec) { s.Provider = agentsagatype.ProviderBedrock }, `want "anthropic-vertex"`},
	} {
		t.Run(name, func(t *testing.T) {
			spec := ok
			tc.edit(&spec)
			_, err := newVertexModel(spec, "", nil)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	_, err := newVertexModel(ok, "", nil)
	require.NoError(t, err)
}
