package worker_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/internal/providerwire"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/worker"
	"github.com/agentsaga/agentsaga/workflows"
)

// leakSecret is the API key the leak test uses: random-looking, so any
// ten characters of it found anywhere are a leak, not a coincidence.
const leakSecret = "sk-Zq8RfTnW3xLm7Pc2Vb9KdH4sYj6G"

// syncBuffer is a bytes.Buffer the worker's goroutines can log into.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startLoggedWorker runs a worker on queue whose Temporal client logs
// everything, debug included, into the returned buffer (in production the
// worker logs through worker.Config.Logger, given to Dial); it returns
// that client. Both stop when the test ends.
func startLoggedWorker(ctx context.Context, t *testing.T, store *ledger.Store, queue string) (client.Client, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, err := client.NewClientFromExisting(temporalClient, client.Options{Namespace: "default", Logger: log.NewStructuredLogger(logger)})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	w, err := worker.New(ctx, c, store, worker.Options{Config: agentsaga.Config{TaskQueue: queue}})
	require.NoError(t, err)
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop) // runs before c.Close: cleanups run last first
	return c, logs
}

// echoingProvider is an OpenAI-compatible server that echoes the request's
// key header (Authorization, or Anthropic's X-Api-Key) back, as a
// misconfigured proxy or a chatty error page does. Under /ok it asks for
// word_count, then answers; under /401 and /500 it fails with that status,
// the header in the body and in a response header.
type echoingProvider struct {
	mu   sync.Mutex
	auth []string
}

func (p *echoingProvider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	auth := r.Header.Get("Authorization")
	if auth == "" {
		auth = r.Header.Get("X-Api-Key")
	}
	body, _ := io.ReadAll(r.Body)
	p.mu.Lock()
	p.auth = append(p.auth, auth)
	p.mu.Unlock()
	w.Header().Set("X-Echo-Authorization", auth)
	switch {
	case strings.HasPrefix(r.URL.Path, "/401"):
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintf(w, `{"error":{"message":"Incorrect API key provided: %s","type":"invalid_request_error","code":"invalid_api_key"},"request_headers":{"Authorization":%q}}`, auth, auth)
	case strings.HasPrefix(r.URL.Path, "/500"):
		// The key straddles the 512-byte cut of an error body: redacting
		// after cutting would leave its first half behind.
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprintf(w, `{"error":"upstream failed","padding":"%s","authorization":%q}`, strings.Repeat(".", 470), auth)
	case bytes.Contains(body, []byte(`"role":"tool"`)):
		_ = providerwire.WriteChatCompletion(w, providerwire.Streams(body), []byte(`{"id":"c2","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"finish_reason":"stop",
			"message":{"role":"assistant","content":"three words"}}],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}`))
	default:
		_ = providerwire.WriteChatCompletion(w, providerwire.Streams(body), []byte(`{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"finish_reason":"tool_calls",
			"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"word_count","arguments":"{\"text\":\"one two three\"}"}}]}}],
			"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}`))
	}
}

// leaks reports where in haystack any ten consecutive characters of the
// secret occur, so a key cut in half is found too.
func leaks(haystack string) []string { return leaksOf(leakSecret, haystack) }

func leaksOf(secret, haystack string) []string {
	var found []string
	for i := 0; i+10 <= len(secret); i++ {
		if j := strings.Index(haystack, secret[i:i+10]); j >= 0 {
			found = append(found, haystack[max(0, j-80):min(len(haystack), j+40)])
		}
	}
	return found
}

var payloadData = regexp.MustCompile(`"data":\s*"([A-Za-z0-9+/=]*)"`)

// historyJSON is every event of the workflow's history as JSON, with each
// payload's bytes (base64 in JSON) decoded and appended, so a key inside
// an activity's input or result would be seen.
func historyJSON(ctx context.Context, t *testing.T, workflowID string) string {
	t.Helper()
	var out strings.Builder
	iter := temporalClient.GetWorkflowHistory(ctx, workflowID, "", false, 0)
	for iter.HasNext() {
		event, err := iter.Next()
		require.NoError(t, err)
		encoded, err := protojson.Marshal(event)
		require.NoError(t, err)
		out.Write(encoded)
		out.WriteByte('\n')
		for _, m := range payloadData.FindAllSubmatch(encoded, -1) {
			decoded, err := base64.StdEncoding.DecodeString(string(m[1]))
			require.NoError(t, err)
			out.Write(decoded)
			out.WriteByte('\n')
		}
	}
	return out.String()
}

// The model's API key is read from the environment on the worker and must
// never leave it except in the Authorization header: not into workflow
// history, the ledger, the worker's logs or any error, even when the
// provider echoes it back in a 401 or a 500.
func TestAPIKeyNeverLeavesTheWorker(t *testing.T) {
	t.Setenv("AGENTSAGA_LEAK_TEST_KEY", leakSecret)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	store := ledgertest.NewHandle(t)
	provider := &echoingProvider{}
	server := httptest.NewServer(provider)
	defer server.Close()

	queue := "leak-" + t.Name()
	c, logs := startLoggedWorker(ctx, t, store, queue)

	var errorsSeen []string
	var histories strings.Builder
	for _, tc := range []struct{ provider, path string }{
		{"openai", "ok"}, {"openai", "401"}, {"openai", "500"}, {"anthropic", "401"},
	} {
		path := tc.path
		id := "leak-" + tc.provider + "-" + path
		spec, err := workflows.ParseSpec([]byte(fmt.Sprintf(`
goal: count the words of the secret-free goal %s
budget: {steps: 3}
retry: {max_attempts: 2, backoff_base_seconds: 0.05, backoff_cap_seconds: 0.1}
model: {provider: %s, name: m, base_url: "%s/%s", api_key_env: AGENTSAGA_LEAK_TEST_KEY}
tools:
  - {name: word_count, kind: go, parameters: {type: object, properties: {text: {type: string}}, required: [text]}}
`, id, tc.provider, server.URL, path)))
		require.NoError(t, err)
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue}, workflows.AgentRun, spec)
		require.NoError(t, err)
		var result workflows.RunResult
		runErr := run.Get(ctx, &result)
		if path == "ok" {
			require.NoError(t, runErr)
			assert.Equal(t, agentsagatype.RunCompleted, result.Status)
		} else {
			require.Error(t, runErr, path)
			// Every layer of the error, and the result it carries.
			for e := runErr; e != nil; e = errors.Unwrap(e) {
				errorsSeen = append(errorsSeen, e.Error())
			}
			var appErr *temporal.ApplicationError
			require.True(t, errors.As(runErr, &appErr), path)
			require.NoError(t, appErr.Details(&result))
			assert.Equal(t, agentsagatype.RunFailed, result.Status, path)
		}
		encoded, err := json.Marshal(result)
		require.NoError(t, err)
		errorsSeen = append(errorsSeen, result.Reason, string(encoded))
		histories.WriteString(historyJSON(ctx, t, id))
	}

	// The key was used, so its absence below means something.
	provider.mu.Lock()
	auth := provider.auth
	provider.mu.Unlock()
	require.Len(t, auth, 6, "two turns for ok, one for each 401, two attempts for 500")
	for _, a := range auth {
		assert.Equal(t, leakSecret, strings.TrimPrefix(a, "Bearer "))
	}

	var ledgerText strings.Builder
	for table, rows := range ledgertest.Dump(t, ledgerdb.Of(store)) {
		for _, row := range rows {
			fmt.Fprintf(&ledgerText, "%s: %s\n", table, row)
		}
	}
	places := map[string]string{
		"workflow history": histories.String(),
		"ledger":           ledgerText.String(),
		"worker logs":      logs.String(),
		"errors":           strings.Join(errorsSeen, "\n"),
	}
	for place, text := range places {
		assert.Empty(t, leaks(text), "the API key leaked into the %s", place)
	}
	// Positive controls: each place holds the provider's echoed error,
	// with the key redacted, so the scan looked where a key would be.
	assert.Contains(t, places["workflow history"], "count the words of the secret-free goal", "payloads were decoded")
	for place, text := range places {
		assert.Contains(t, text, "Incorrect API key provided: Bearer [redacted]", "the 401's echo reached the %s", place)
	}
	for _, place := range []string{"workflow history", "ledger", "errors"} {
		assert.Contains(t, places[place], "HTTP 500", "the 500 reached the %s", place)
	}
}

// headerSecret is the token an HTTP tool's header reads from the worker's
// environment in the header leak test.
const headerSecret = "crm-Hv4Qx9TzL2mWc7Rk3Np8Yb6Ds"

// echoingTool is a hostile HTTP tool: it echoes the Authorization header in
// its answer (/ok), in a 500 whose body puts it across the 512-byte cut of
// an error body (/fail), and in a 400 (/bad).
type echoingTool struct {
	mu   sync.Mutex
	auth []string
}

func (e *echoingTool) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	auth := r.Header.Get("Authorization")
	e.mu.Lock()
	e.auth = append(e.auth, auth)
	e.mu.Unlock()
	w.Header().Set("X-Echo-Authorization", auth)
	switch r.URL.Path {
	case "/fail":
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprintf(w, `{"error":"upstream failed","padding":"%s","authorization":%q}`, strings.Repeat(".", 470), auth)
	case "/bad":
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"error":"you sent %s, which is not a filter"}`, auth)
	default:
		fmt.Fprintf(w, `{"customer":"C-7","request_headers":{"Authorization":%q}}`, auth)
	}
}

// An HTTP tool's header from the worker's environment, `Authorization:
// "Bearer ${env:...}"`, reaches the tool and nothing else: not workflow
// history, the ledger, the worker's logs or any error, even when the tool
// echoes it back in its answer, in a 500 that is retried and in a 400. A
// header whose variable is not set fails the call, naming the variable.
func TestToolHeaderNeverLeavesTheWorker(t *testing.T) {
	t.Setenv("AGENTSAGA_LEAK_TEST_TOKEN", headerSecret)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	store := ledgertest.NewHandle(t)
	tool := &echoingTool{}
	server := httptest.NewServer(tool)
	defer server.Close()

	queue := "leak-" + t.Name()
	c, logs := startLoggedWorker(ctx, t, store, queue)

	id := "leak-tool-headers"
	spec, err := workflows.ParseSpec([]byte(fmt.Sprintf(`
goal: look customer C-7 up in the CRM
budget: {steps: 4}
retry: {max_attempts: 2, backoff_base_seconds: 0.05, backoff_cap_seconds: 0.1}
model:
  provider: scripted
  script:
    - tool_calls: [{name: crm_ok, arguments: {}}]
    - tool_calls: [{name: crm_fail, arguments: {}}, {name: crm_bad, arguments: {}}, {name: crm_unset, arguments: {}}]
    - content: done
tools:
  - {name: crm_ok, kind: http, url: "%[1]s/ok", headers: {Authorization: "Bearer ${env:AGENTSAGA_LEAK_TEST_TOKEN}"}}
  - {name: crm_fail, kind: http, url: "%[1]s/fail", headers: {Authorization: "Bearer ${env:AGENTSAGA_LEAK_TEST_TOKEN}"}}
  - {name: crm_bad, kind: http, url: "%[1]s/bad", headers: {Authorization: "Bearer ${env:AGENTSAGA_LEAK_TEST_TOKEN}"}}
  - {name: crm_unset, kind: http, url: "%[1]s/ok", headers: {X-Api-Key: "${env:AGENTSAGA_LEAK_TEST_UNSET}"}}
`, server.URL)))
	require.NoError(t, err)
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue}, workflows.AgentRun, spec)
	require.NoError(t, err)
	var result workflows.RunResult
	require.NoError(t, run.Get(ctx, &result))
	assert.Equal(t, agentsagatype.RunCompleted, result.Status)

	// The header was sent, so its absence below means something: once to
	// /ok, twice to /fail (retried), once to /bad; never for crm_unset.
	tool.mu.Lock()
	auth := tool.auth
	tool.mu.Unlock()
	require.Len(t, auth, 4)
	for _, a := range auth {
		assert.Equal(t, "Bearer "+headerSecret, a)
	}

	var errorsSeen []string
	for _, e := range result.Trace {
		if e.Error != "" {
			errorsSeen = append(errorsSeen, e.Error)
		}
	}
	encoded, err := json.Marshal(result)
	require.NoError(t, err)
	var ledgerText strings.Builder
	for table, rows := range ledgertest.Dump(t, ledgerdb.Of(store)) {
		for _, row := range rows {
			fmt.Fprintf(&ledgerText, "%s: %s\n", table, row)
		}
	}
	places := map[string]string{
		"workflow history": historyJSON(ctx, t, id),
		"ledger":           ledgerText.String(),
		"worker logs":      logs.String(),
		"errors":           strings.Join(append(errorsSeen, string(encoded)), "\n"),
	}
	for place, text := range places {
		assert.Empty(t, leaksOf(headerSecret, text), "the header's value leaked into the %s", place)
		// Positive controls: the echoes reached each place, redacted.
		assert.Contains(t, text, "you sent Bearer [redacted], which is not a filter", "the 400's echo reached the %s", place)
	}
	for _, place := range []string{"workflow history", "ledger", "errors"} {
		assert.Contains(t, places[place], "HTTP 500", "the 500 reached the %s", place)
		assert.Contains(t, places[place], "header X-Api-Key: environment variable AGENTSAGA_LEAK_TEST_UNSET is not set on the worker", place)
	}
	for _, place := range []string{"workflow history", "ledger"} {
		assert.Contains(t, places[place], `{\"Authorization\":\"Bearer [redacted]\"}`, "the answer's echo reached the %s", place)
	}
}

// Idempotency keys are namespaced by workflow: two runs with the same spec
// making the same calls with the same arguments are different requests to
// the tool and different ledger actions, never one deduplicated into the
// other.
func TestIdempotencyKeysAreNamespacedByWorkflow(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store := ledgertest.NewHandle(t)
	tool := newSideEffects("")
	server := httptest.NewServer(tool)
	defer server.Close()
	queue := "namespaced-" + t.Name()
	w := startWorker(ctx, t, store, queue)
	defer w.Stop()

	ids := []string{"same-spec-run-a", "same-spec-run-b"}
	runs := make([]client.WorkflowRun, len(ids))
	for i, id := range ids {
		run, err := temporalClient.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue}, workflows.AgentRun, chargeSpec(server.URL))
		require.NoError(t, err)
		runs[i] = run
	}
	for _, run := range runs {
		var result workflows.RunResult
		require.NoError(t, run.Get(ctx, &result))
		assert.Equal(t, agentsagatype.RunCompleted, result.Status)
	}

	seen, applied := tool.counts()
	var want []string
	for _, id := range ids {
		for _, activity := range []string{"step-001-call-1-charge", "step-002-call-1-charge"} {
			key := id + "/" + activity
			want = append(want, key)
			assert.Equal(t, 1, seen[key], "%s reached the tool once", key)
			assert.Equal(t, 1, applied[key], "%s was applied once", key)
		}
		actions, err := ledgerdb.Of(store).ListActions(ctx, id)
		require.NoError(t, err)
		require.Len(t, actions, 2, id)
		for _, a := range actions {
			assert.True(t, strings.HasPrefix(a.Key, id+"/"), "%s is under its workflow", a.Key)
			assert.Equal(t, agentsagatype.ActionCompleted, a.Status)
		}
	}
	assert.ElementsMatch(t, want, keysOf(applied), "four distinct keys for four calls")
	var toolActions int
	require.NoError(t, ledgerdb.Of(store).Pool().QueryRow(ctx, `SELECT count(*) FROM actions WHERE kind = 'tool'`).Scan(&toolActions))
	assert.Equal(t, 4, toolActions, "four ledger actions, none shared")
}

func keysOf(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}
