package activities

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/agentsagatype"
)

const (
	bedrockTestModel  = "anthropic.claude-sonnet-4-5-20250929-v1:0"
	bedrockTestRegion = "us-west-2"
	bedrockTestKeyID  = "AKIDEXAMPLE0TEST"
	bedrockTestSecret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
)

// bedrockRequest is what the fake Bedrock runtime saw of a request.
type bedrockRequest struct {
	method, path, escapedPath string
	header                    http.Header
	body                      []byte
}

// bedrockServer is a fake Bedrock runtime endpoint. A 200 answers with
// frames, AWS event-stream framed (application/vnd.amazon.eventstream);
// any other status with body as JSON.
type bedrockServer struct {
	URL      string
	requests atomic.Int32
	last     atomic.Pointer[bedrockRequest]
}

func newBedrockServer(t *testing.T, status int, frames []eventstream.Message, body string) *bedrockServer {
	t.Helper()
	bs := &bedrockServer{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bs.requests.Add(1)
		b, _ := io.ReadAll(r.Body)
		bs.last.Store(&bedrockRequest{method: r.Method, path: r.URL.Path, escapedPath: r.URL.EscapedPath(), header: r.Header.Clone(), body: b})
		if status != http.StatusOK {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("X-Amzn-ErrorType", "ThrottlingException")
			w.WriteHeader(status)
			_, _ = io.WriteString(w, body)
			return
		}
		w.Header().Set("Content-Type", "application/vnd.amazon.eventstream")
		w.Header().Set("X-Amzn-Bedrock-Content-Type", "application/json")
		enc := eventstream.NewEncoder()
		for _, frame := range frames {
			if err := enc.Encode(w, frame); err != nil {
				t.Errorf("bedrock server: %v", err)
				return
			}
			if f, ok := w.(http.Flusher); ok {
				f.Flush()
			}
		}
	}))
	t.Cleanup(srv.Close)
	bs.URL = srv.URL
	return bs
}

// bedrockChunk frames one Anthropic stream event as Bedrock sends it: a
// "chunk" event whose JSON payload holds the event, base64, in "bytes".
func bedrockChunk(t *testing.T, event string) eventstream.Message {
	t.Helper()
	require.True(t, json.Valid([]byte(event)), "event %s", event)
	payload, err := json.Marshal(map[string]string{"bytes": base64.StdEncoding.EncodeToString([]byte(event)), "p": "abcdefgh"})
	require.NoError(t, err)
	return eventstream.Message{
		Headers: eventstream.Headers{
			{Name: ":event-type", Value: eventstream.StringValue("chunk")},
			{Name: ":content-type", Value: eventstream.StringValue("application/json")},
			{Name: ":message-type", Value: eventstream.StringValue("event")},
		},
		Payload: payload,
	}
}

// bedrockException frames an exception Bedrock sends mid-stream.
func bedrockException(kind, message string) eventstream.Message {
	payload, _ := json.Marshal(map[string]string{"message": message})
	return eventstream.Message{
		Headers: eventstream.Headers{
			{Name: ":exception-type", Value: eventstream.StringValue(kind)},
			{Name: ":content-type", Value: eventstream.StringValue("application/json")},
			{Name: ":message-type", Value: eventstream.StringValue("exception")},
		},
		Payload: payload,
	}
}

// anthropicTextAndToolEvents is a hand-written Messages stream: text in
// two pieces, a tool_use whose input comes in two pieces, usage with a
// cache read, and Bedrock's invocation metrics on message_stop.
var anthropicTextAndToolEvents = []string{
	`{"type":"message_start","message":{"id":"msg_bdrk_01","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":25,"output_tokens":1,"cache_creation_input_tokens":0,"cache_read_input_tokens":5}}}`,
	`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello "}}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"from the cloud."}}`,
	`{"type":"content_block_stop","index":0}`,
	`{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_cloud_1","name":"lookup","input":{}}}`,
	`{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"q\":"}}`,
	`{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"\"x\"}"}}`,
	`{"type":"content_block_stop","index":1}`,
	`{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":17}}`,
	`{"type":"message_stop","amazon-bedrock-invocationMetrics":{"inputTokenCount":25,"outputTokenCount":17,"invocationLatency":512,"firstByteLatency":200}}`,
}

func bedrockFrames(t *testing.T, events []string) []eventstream.Message {
	frames := make([]eventstream.Message, len(events))
	for i, e := range events {
		frames[i] = bedrockChunk(t, e)
	}
	return frames
}

// withAWSEnvironment gives the test static credentials in the AWS
// variables (the first link of the default chain), and nothing else the
// chain could find: no profile, no files, no container or instance role.
// The AWS configuration is loaded for each model, not kept.
func withAWSEnvironment(t *testing.T, keyID, secret string) {
	t.Helper()
	for name, value := range map[string]string{
		"AWS_ACCESS_KEY_ID":                      keyID,
		"AWS_SECRET_ACCESS_KEY":                  secret,
		"AWS_SESSION_TOKEN":                      "",
		"AWS_BEARER_TOKEN_BEDROCK":               "",
		"AWS_PROFILE":                            "",
		"AWS_DEFAULT_PROFILE":                    "",
		"AWS_REGION":                             "",
		"AWS_DEFAULT_REGION":                     "",
		"AWS_CONFIG_FILE":                        t.TempDir() + "/no-config",
		"AWS_SHARED_CREDENTIALS_FILE":            t.TempDir() + "/no-credentials",
		"AWS_WEB_IDENTITY_TOKEN_FILE":            "",
		"AWS_ROLE_ARN":                           "",
		"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "",
		"AWS_CONTAINER_CREDENTIALS_FULL_URI":     "",
		"AWS_EC2_METADATA_DISABLED":              "true",
		// The first-party SDK's variables must not reach a Bedrock request.
		"ANTHROPIC_API_KEY":    "sk-ant-from-the-environment",
		"ANTHROPIC_AUTH_TOKEN": "from-the-environment",
		"ANTHROPIC_BASE_URL":   "https://elsewhere.invalid",
	} {
		t.Setenv(name, value)
	}
	saved := awsConfig
	awsConfig = func(region string) (aws.Config, error) {
		return config.LoadDefaultConfig(context.Background(), config.WithRegion(region))
	}
	t.Cleanup(func() { awsConfig = saved })
}

func bedrockSpec(baseURL string) agentsagatype.ModelSpec {
	return agentsagatype.ModelSpec{Provider: agentsagatype.ProviderBedrock, Name: bedrockTestModel, Region: bedrockTestRegion,
		BaseURL: baseURL, MaxTokens: 2048}
}

func newBedrockTestModel(t *testing.T, spec agentsagatype.ModelSpec) Model {
	t.Helper()
	m, err := builtinModels().build(spec, "", &http.Client{Timeout: 10 * time.Second})
	require.NoError(t, err)
	return m
}

var sigV4Authorization = regexp.MustCompile(`^AWS4-HMAC-SHA256 Credential=` + bedrockTestKeyID + `/(\d{8})/` + bedrockTestRegion +
	`/bedrock/aws4_request, SignedHeaders=([a-z0-9-]+(?:;[a-z0-9-]+)*), Signature=[0-9a-f]{64}$`)

func TestBedrockModelSignsAndDecodesTheEventStream(t *testing.T) {
	withAWSEnvironment(t, bedrockTestKeyID, bedrockTestSecret)
	bs := newBedrockServer(t, http.StatusOK, bedrockFrames(t, anthropicTextAndToolEvents), "")
	m := newBedrockTestModel(t, bedrockSpec(bs.URL))
	var streamed bytes.Buffer
	req := ModelRequest{Messages: []agentsagatype.Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "hi"}},
		Tools:  []agentsagatype.ToolDef{{Name: "lookup", Parameters: json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"}}}`)}},
		OnText: func(s string) { streamed.WriteString(s) }}
	turn, err := m.Turn(context.Background(), req)
	require.NoError(t, err)

	got := bs.last.Load()
	require.NotNil(t, got)
	assert.Equal(t, http.MethodPost, got.method)
	assert.Equal(t, "/model/"+bedrockTestModel+"/invoke-with-response-stream", got.path)
	assert.Equal(t, "/model/anthropic.claude-sonnet-4-5-20250929-v1%3A0/invoke-with-response-stream", got.escapedPath, "the model id is escaped in the path")
	auth := got.header.Get("Authorization")
	match := sigV4Authorization.FindStringSubmatch(auth)
	require.NotNil(t, match, "Authorization %q is not a SigV4 signature of the test key for bedrock in %s", auth, bedrockTestRegion)
	amzDate := got.header.Get("X-Amz-Date")
	assert.Regexp(t, `^\d{8}T\d{6}Z$`, amzDate)
	assert.Equal(t, match[1], amzDate[:8], "the credential scope's date is the request's")
	assert.Contains(t, ";"+match[2]+";", ";host;")
	assert.Contains(t, ";"+match[2]+";", ";x-amz-date;")
	assert.NotContains(t, auth, bedrockTestSecret)
	assert.Empty(t, got.header.Get("X-Api-Key"), "no first-party key from the environment")

	var body map[string]any
	require.NoError(t, json.Unmarshal(got.body, &body))
	assert.Equal(t, "bedrock-2023-05-31", body["anthropic_version"])
	assert.NotContains(t, body, "model", "the model is in the path")
	assert.NotContains(t, body, "stream", "the stream is in the path")
	assert.EqualValues(t, 2048, body["max_tokens"])
	assert.NotEmpty(t, body["messages"])
	assert.NotEmpty(t, body["tools"])
	assert.NotEmpty(t, body["system"])
	assert.Equal(t, int32(1), bs.requests.Load())

	assert.Equal(t, "Hello from the cloud.", turn.Content)
	assert.Equal(t, "Hello from the cloud.", streamed.String())
	assert.Equal(t, "claude-sonnet-4-5-20250929", turn.Model)
	assert.Equal(t, agentsagatype.Usage{InputTokens: 30, OutputTokens: 17, CachedInputTokens: 5}, turn.Usage)
	require.Len(t, turn.ToolCalls, 1)
	assert.Equal(t, agentsagatype.ToolCall{ID: "toolu_cloud_1", Name: "lookup", Arguments: `{"q":"x"}`}, turn.ToolCalls[0])
}

// An exception Bedrock sends after the stream began breaks the turn, which
// another attempt may well bring whole: a plain (retryable) error.
func TestBedrockModelStreamException(t *testing.T) {
	withAWSEnvironment(t, bedrockTestKeyID, bedrockTestSecret)
	frames := bedrockFrames(t, anthropicTextAndToolEvents[:3])
	frames = append(frames, bedrockException("throttlingException", "Too many tokens, please wait before trying again."))
	bs := newBedrockServer(t, http.StatusOK, frames, "")
	m := newBedrockTestModel(t, bedrockSpec(bs.URL))
	_, err := m.Turn(context.Background(), ModelRequest{Messages: []agentsagatype.Message{{Role: "user", Content: "hi"}}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "the stream broke after 3 events")
	assert.Contains(t, err.Error(), "throttlingException")
	assert.True(t, classify(err).retryable)
}

func TestBedrockModelHTTPErrorNoSDKRetry(t *testing.T) {
	withAWSEnvironment(t, bedrockTestKeyID, bedrockTestSecret)
	bs := newBedrockServer(t, http.StatusTooManyRequests, nil, `{"message":"Too many requests, please wait before trying again."}`)
	m := newBedrockTestModel(t, bedrockSpec(bs.URL))
	_, err := m.Turn(context.Background(), ModelRequest{Messages: []agentsagatype.Message{{Role: "user", Content: "hi"}}})
	var httpErr *HTTPError
	require.ErrorAs(t, err, &httpErr)
	assert.Equal(t, http.StatusTooManyRequests, httpErr.StatusCode)
	assert.Equal(t, int32(1), bs.requests.Load(), "one attempt: the SDK's retries and the AWS retryer are out of it")
	assert.NotContains(t, err.Error(), bedrockTestSecret)
}

// With no credentials anywhere in the chain the turn fails before
// anything is sent, saying where credentials were looked for.
func TestBedrockModelNoCredentials(t *testing.T) {
	withAWSEnvironment(t, "", "")
	bs := newBedrockServer(t, http.StatusOK, bedrockFrames(t, anthropicTextAndToolEvents), "")
	m := newBedrockTestModel(t, bedrockSpec(bs.URL))
	_, err := m.Turn(context.Background(), ModelRequest{Messages: []agentsagatype.Message{{Role: "user", Content: "hi"}}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no AWS credentials from the default chain")
	assert.True(t, classify(err).retryable)
	assert.Equal(t, int32(0), bs.requests.Load())
}

// A Bedrock API key in AWS_BEARER_TOKEN_BEDROCK is sent as a bearer token
// instead of a signature (the SDK's rule, documented).
func TestBedrockModelBearerTokenFromTheEnvironment(t *testing.T) {
	withAWSEnvironment(t, bedrockTestKeyID, bedrockTestSecret)
	t.Setenv("AWS_BEARER_TOKEN_BEDROCK", "bedrock-api-key-test")
	bs := newBedrockServer(t, http.StatusOK, bedrockFrames(t, anthropicTextAndToolEvents), "")
	m := newBedrockTestModel(t, bedrockSpec(bs.URL))
	_, err := m.Turn(context.Background(), ModelRequest{Messages: []agentsagatype.Message{{Role: "user", Content: "hi"}}})
	require.NoError(t, err)
	assert.Equal(t, "Bearer bedrock-api-key-test", bs.last.Load().header.Get("Authorization"))
}

func TestNewBedrockModelSaysWhatIsMissing(t *testing.T) {
	withAWSEnvironment(t, bedrockTestKeyID, bedrockTestSecret)
	ok := bedrockSpec("")
	for name, tc := range map[string]struct {
		edit func(*agentsagatype.ModelSpec)
		want string
	}{
		"model":       {func(s *agentsagatype.ModelSpec) { s.Name = "" }, "model.name"},
		"region":      {func(s *agentsagatype.ModelSpec) { s.Region = "" }, "model.region"},
		"api key env": {func(s *agentsagatype.ModelSpec) { s.APIKeyEnv = "SOME_KEY" }, "model.api_key_env is not used"},
		"provider":    {func(s *agentsagatype.ModelSpec) { s.Provider = agentsagatype.ProviderAnthropic }, `want "anthropic-bedrock"`},
	} {
		t.Run(name, func(t *testing.T) {
			spec := ok
			tc.edit(&spec)
			_, err := newBedrockModel(spec, "", nil)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	_, err := newBedrockModel(ok, "", nil)
	require.NoError(t, err)
}

// The production loader keeps a region's configuration, and with it the
// cache of its credentials, for every later model of the region.
func TestBedrockAWSConfigIsKeptPerRegion(t *testing.T) {
	withAWSEnvironment(t, bedrockTestKeyID, bedrockTestSecret)
	saved := awsConfigs.loaded
	awsConfigs.loaded = nil
	t.Cleanup(func() { awsConfigs.loaded = saved })
	a, err := defaultAWSConfig(bedrockTestRegion)
	require.NoError(t, err)
	b, err := defaultAWSConfig(bedrockTestRegion)
	require.NoError(t, err)
	other, err := defaultAWSConfig("eu-central-1")
	require.NoError(t, err)
	assert.Equal(t, bedrockTestRegion, a.Region)
	assert.Equal(t, "eu-central-1", other.Region)
	assert.Same(t, a.Credentials, b.Credentials)
	assert.NotSame(t, a.Credentials, other.Credentials)
}
