package workflows_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/internal/providerwire"
	"github.com/agentsaga/agentsaga/workflows"
)

// Every malformed spec is refused by ParseSpec with an error that names
// the field (or, for YAML that does not parse, the line).
func TestParseSpecNamesTheFieldOfEveryMalformedSpec(t *testing.T) {
	t.Parallel()
	const model = "model: {provider: scripted, script: [{content: x}]}\n"
	const head = "goal: g\nbudget: {steps: 3}\n"
	for name, tc := range map[string]struct{ spec, want string }{
		// Missing fields.
		"empty document":     {"", "goal: missing"},
		"null document":      {"null", "goal: missing"},
		"missing goal":       {"budget: {steps: 3}\n" + model, "goal: missing"},
		"missing model":      {head, "model.provider: missing"},
		"empty model":        {head + "model: {}\n", "model.provider: missing"},
		"missing budget":     {"goal: g\n" + model, "budget.steps"},
		"missing model name": {head + "model: {provider: anthropic}\n", "model.name"},
		"tool without name":  {head + model + "tools: [{kind: go}]", `tools[0]: tool "": name`},
		"tool without kind":  {head + model + "tools: [{name: a}]", "tools[0]: tool a: kind is missing"},
		"scripted call without name": {head + "model: {provider: scripted, script: [{tool_calls: [{arguments: {}}]}]}\n",
			"model.script[0].tool_calls[0].name"},
		// Bad budget values.
		"zero steps":        {"goal: g\nbudget: {steps: 0}\n" + model, "budget.steps"},
		"negative steps":    {"goal: g\nbudget: {steps: -2}\n" + model, "budget.steps: -2"},
		"fractional steps":  {"goal: g\nbudget: {steps: 2.5}\n" + model, "steps"},
		"steps as text":     {"goal: g\nbudget: {steps: ten}\n" + model, "steps"},
		"steps overflow":    {"goal: g\nbudget: {steps: 99999999999999999999}\n" + model, "steps"},
		"negative tokens":   {"goal: g\nbudget: {steps: 3, tokens: -5}\n" + model, "budget.tokens: -5"},
		"zero seconds":      {"goal: g\nbudget: {steps: 3, seconds: 0}\n" + model, "budget.seconds: 0"},
		"negative usd":      {"goal: g\nbudget: {steps: 3, usd: -0.5}\n" + model, "budget.usd: -0.5"},
		"unknown dimension": {"goal: g\nbudget: {steps: 3, minutes: 5}\n" + model, `unknown field "minutes"`},
		"budget not a map":  {"goal: g\nbudget: 5\n" + model, "budget"},
		"finish_at > 1":     {head + "finish_at: 1.5\n" + model, "finish_at: 1.5"},
		"finish_at < 0":     {head + "finish_at: -0.1\n" + model, "finish_at: -0.1"},
		"negative attempts": {head + "retry: {max_attempts: -1}\n" + model, "retry.max_attempts: -1"},
		"negative timeout":  {head + model + "tools: [{name: a, kind: go, timeout_seconds: -1}]", "tools[0]: tool a: timeout_seconds"},
		"negative escalate": {head + "escalate: {after_tool_failures: -1}\n" + model, "escalate.after_tool_failures"},
		// Unknown kinds and values.
		"unknown tool kind":    {head + model + "tools: [{name: a, kind: shell}]", `tools[0]: tool a: unknown kind "shell"`},
		"bad tool name":        {head + model + "tools: [{name: 'rm -rf', kind: go}]", `tools[0]: tool "rm -rf": name`},
		"non-http url":         {head + model + "tools: [{name: a, kind: http, url: 'file:///etc/passwd'}]", `tools[0]: tool a: url "file:///etc/passwd"`},
		"bad method":           {head + model + "tools: [{name: a, kind: http, url: 'http://x/y', method: TRACE}]", `tools[0]: tool a: method "TRACE"`},
		"agent without agents": {head + model + "tools: [{name: a, kind: agent}]", "agents.a is not defined"},
		"compensate unknown":   {head + model + "tools: [{name: a, kind: go, compensate: {tool: nope}}]", `compensate.tool "nope"`},
		"unknown provider":     {head + "model: {provider: palm}\n", `model.provider: unknown provider "palm"`},
		"fallback without name": {head + "model: {provider: openai, name: gpt-4o, fallbacks: [{provider: anthropic}]}\n",
			"model.fallbacks[0]: model.name"},
		"fallback of a fallback": {head + "model: {provider: openai, name: gpt-4o, fallbacks: [{provider: anthropic, name: c, fallbacks: [{provider: openai, name: d}]}]}\n",
			"model.fallbacks[0].fallbacks: a fallback has no fallbacks of its own"},
		"fallback twice": {head + "model: {provider: openai, name: gpt-4o, fallbacks: [{provider: openai, name: gpt-4o}]}\n",
			"model.fallbacks[0]: openai:gpt-4o is already the model"},
		"bad on_fire":       {head + "watchdog: {on_fire: explode}\n" + model, "watchdog.on_fire"},
		"bad on_budget":     {head + "on_budget_exhausted: panic\n" + model, "on_budget_exhausted"},
		"goal not a string": {"goal: 7\nbudget: {steps: 3}\n" + model, "goal"},
		// Bad YAML.
		"unclosed flow":    {"goal: [unclosed", "not valid YAML"},
		"tab indentation":  {"goal: g\n\tbudget: {steps: 3}\n" + model, "line 2"},
		"invalid UTF-8":    {"goal: \"\xff\"\n" + head[8:] + model, "not valid YAML"},
		"a list":           {"[]", "cannot unmarshal array"},
		"duplicate key":    {"goal: g\ngoal: h\nbudget: {steps: 3}\n" + model, `"goal" already set`},
		"duplicate nested": {head + "model: {provider: scripted, provider: openai, script: [{content: x}]}\n", `"provider" already set`},
		// Text Postgres cannot store.
		"NUL in goal":        {"goal: \"a\\0b\"\nbudget: {steps: 3}\n" + model, `goal: contains a NUL character`},
		"NUL in system":      {head + "system: \"x\\0\"\n" + model, `system: contains a NUL character`},
		"NUL in script":      {head + "model: {provider: scripted, script: [{content: ok}, {content: \"a\\0\"}]}\n", `model.script[1].content: contains a NUL`},
		"NUL in JSON string": {`{"goal":"g","budget":{"steps":3},"model":{"provider":"scripted","script":[{"content":"x"}]},"tools":[{"name":"a","kind":"go","description":"\u0000"}]}`, `tools[0].description: contains a NUL`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := workflows.ParseSpec([]byte(tc.spec))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.True(t, strings.HasPrefix(err.Error(), "spec: "), "every spec error says it is the spec's: %v", err)
		})
	}
}

// newEnv is a workflow test environment with the real activities on a
// fresh ledger and box as the worker's Go tools.
func newRunEnv(t *testing.T, box *activities.Toolbox) (*testsuite.TestWorkflowEnvironment, *ledgerdb.Store) {
	t.Helper()
	store := ledgertest.NewStore(t)
	env := newEnv()
	// A write the ledger refuses is retried forever by the bookkeeping
	// activities; a bound turns that hang into a failure.
	env.SetTestTimeout(30 * time.Second)
	registerWithRetryHook(t, env, store)
	activities.Register(env, &activities.Activities{Ledger: store, Toolbox: box}, false)
	return env, store
}

// A spec that bypasses ParseSpec (a client that starts the workflow with
// its own JSON) is refused by the workflow itself, naming the field,
// before anything is written to the ledger.
func TestAgentRunRefusesMalformedSpecBeforeTheLedger(t *testing.T) {
	t.Parallel()
	good := func() workflows.RunSpec {
		return workflows.RunSpec{Goal: "g", Budget: budget.Limits{Steps: 3},
			Model: agentsagatype.ModelSpec{Provider: agentsagatype.ProviderScripted, Script: []agentsagatype.ScriptedTurn{{Content: "x"}}}}
	}
	for name, tc := range map[string]struct {
		mutate func(*workflows.RunSpec)
		want   string
		// decoded: the budget's own decoder refuses the value while the
		// workflow's input is decoded, before Validate, with the SDK's
		// error type; the message still names the field.
		decoded bool
	}{
		"zero value":        {func(s *workflows.RunSpec) { *s = workflows.RunSpec{} }, "budget.steps: 0", true},
		"no steps":          {func(s *workflows.RunSpec) { s.Budget.Steps = 0 }, "budget.steps: 0", true},
		"negative usd":      {func(s *workflows.RunSpec) { s.Budget.USD = -1 }, "budget.usd: -1", true},
		"no goal":           {func(s *workflows.RunSpec) { s.Goal = "" }, "goal: missing", false},
		"unknown tool kind": {func(s *workflows.RunSpec) { s.Tools = []agentsagatype.ToolSpec{{Name: "a", Kind: "shell"}} }, `tools[0]: tool a: unknown kind "shell"`, false},
		"NUL in goal":       {func(s *workflows.RunSpec) { s.Goal = "refund\x00" }, "goal: contains a NUL character", false},
		"finish_at":         {func(s *workflows.RunSpec) { s.FinishAt = 2 }, "finish_at: 2", false},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			env, store := newRunEnv(t, nil)
			before := ledgertest.Counts(t, store)
			spec := good()
			tc.mutate(&spec)
			env.ExecuteWorkflow(workflows.AgentRun, spec)
			require.True(t, env.IsWorkflowCompleted())
			err := env.GetWorkflowError()
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			if !tc.decoded {
				var appErr *temporal.ApplicationError
				require.True(t, errors.As(err, &appErr))
				assert.Equal(t, "InvalidSpec", appErr.Type())
				assert.True(t, appErr.NonRetryable())
			}
			assert.Equal(t, before, ledgertest.Counts(t, store), "a refused spec writes nothing")
		})
	}
}

// A call the model asks for that cannot run (an unknown tool, arguments
// that are not JSON or do not match the schema) goes back to the model as
// an error naming the tool, and never becomes a ledger action.
func TestModelCallsThatCannotRunNeverReachTheLedger(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		call string   // the scripted tool call, YAML
		want []string // what the trace's error says
	}{
		"unknown tool":          {`{name: delete_everything, arguments: {}}`, []string{`unknown tool "delete_everything"`, "the tools are: add"}},
		"path-like name":        {`{name: "../../bin/sh", arguments: {}}`, []string{`unknown tool "../../bin/sh"`, "the tools are: add"}},
		"SQL in name":           {`{name: "add'; DROP TABLE actions; --", arguments: {}}`, []string{`unknown tool "add'; DROP TABLE actions; --"`, "the tools are: add"}},
		"case differs":          {`{name: ADD, arguments: {a: 1, b: 2}}`, []string{`unknown tool "ADD"`, "the tools are: add"}},
		"arguments not JSON":    {`{name: add, arguments: "{\"a\": 1,"}`, []string{`tool "add"`, "not valid JSON"}},
		"arguments not object":  {`{name: add, arguments: "[1, 2]"}`, []string{"tool add", "do not match its schema"}},
		"missing field":         {`{name: add, arguments: {a: 1}}`, []string{"tool add", "do not match its schema", "b"}},
		"field of wrong type":   {`{name: add, arguments: {a: 1, b: "two"}}`, []string{"tool add", "do not match its schema", "/b"}},
		"unexpected field":      {`{name: add, arguments: {a: 1, b: 2, sudo: true}}`, []string{"tool add", "sudo"}},
		"trailing text in args": {`{name: add, arguments: "{\"a\":1,\"b\":2} --"}`, []string{`tool "add"`, "not valid JSON"}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var ran atomic.Int32
			box := activities.NewToolbox()
			box.Register("add", func(context.Context, activities.ToolInvocation) (string, error) {
				ran.Add(1)
				return "3", nil
			})
			env, store := newRunEnv(t, box)
			before := ledgertest.Counts(t, store)
			env.ExecuteWorkflow(workflows.AgentRun, mustSpec(t, `
goal: add
budget: {steps: 3}
model:
  provider: scripted
  script:
    - tool_calls: [`+tc.call+`]
    - content: gave up
tools:
  - name: add
    kind: go
    parameters: {type: object, additionalProperties: false, properties: {a: {type: number}, b: {type: number}}, required: [a, b]}
`))
			require.True(t, env.IsWorkflowCompleted())
			require.NoError(t, env.GetWorkflowError())
			var result workflows.RunResult
			require.NoError(t, env.GetWorkflowResult(&result))
			assert.Equal(t, agentsagatype.RunCompleted, result.Status, "the model read the error and answered")
			var toolErrors []string
			for _, e := range result.Trace {
				if e.Kind == "tool" {
					toolErrors = append(toolErrors, e.Error)
				}
			}
			require.Len(t, toolErrors, 1)
			for _, want := range tc.want {
				assert.Contains(t, toolErrors[0], want)
			}
			assert.Zero(t, ran.Load(), "the tool never ran")

			after := ledgertest.Counts(t, store)
			for _, table := range []string{"compensations", "run_retry_counters", "circuit_breakers"} {
				assert.Equal(t, before[table], after[table], "%s changed", table)
			}
			actions, err := store.ListActions(context.Background(), workflowID)
			require.NoError(t, err)
			assert.Empty(t, actions, "no action on the outside world (the model's turns are kept apart)")
			// Successful model turns deposit a bonus; no retry was paid for.
			var withdrawals int
			require.NoError(t, store.Pool().QueryRow(context.Background(),
				`SELECT count(*) FROM retry_charges WHERE kind = 'withdraw'`).Scan(&withdrawals))
			assert.Zero(t, withdrawals)
			leaves, err := store.ListLeafCalls(context.Background(), workflowID)
			require.NoError(t, err)
			for _, leaf := range leaves {
				assert.Equal(t, ledgerdb.LeafModel, leaf.Kind, "only the model's turns left the process: %s", leaf.ActivityID)
			}
		})
	}
}

// fakeChatModel is an OpenAI-compatible server whose every answer is
// status and body: a 200's chat.completion streamed when the request asks.
func fakeChatModel(t *testing.T, status int, body string) string {
	t.Helper()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if status == http.StatusOK {
			request, _ := io.ReadAll(r.Body)
			if err := providerwire.WriteChatCompletion(w, providerwire.Streams(request), []byte(body)); err != nil {
				t.Errorf("fake chat model: %v", err)
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(ts.Close)
	return ts.URL
}

// Bytes Postgres cannot store, in what a model says or in a provider's
// error, must not stop a run from ending: its last write to the ledger
// (answer, reason) used to fail on them and be retried forever.
func TestBadBytesFromTheModelStillEndTheRun(t *testing.T) {
	t.Parallel()
	answer := `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"finish_reason":"stop",` +
		`"message":{"role":"assistant","content":"refund \u0000 sent ` + "\xff\xfe" + ` ok"}}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`
	for name, tc := range map[string]struct {
		status     int
		body       string
		wantStatus string
		want       string // in the answer or the reason
	}{
		"NUL and invalid UTF-8 in the answer": {200, answer, agentsagatype.RunCompleted, "refund \uFFFD sent \uFFFD ok"},
		"NUL and invalid UTF-8 in a 400 body": {400, "{\"error\":\"bad \x00 request \xff\"}", agentsagatype.RunFailed, "HTTP 400"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			env, store := newRunEnv(t, nil)
			env.ExecuteWorkflow(workflows.AgentRun, mustSpec(t, fmt.Sprintf(`
goal: refund
budget: {steps: 2}
model: {provider: openai, name: m, base_url: %q}
`, fakeChatModel(t, tc.status, tc.body))))
			require.True(t, env.IsWorkflowCompleted(), "the run ended")
			run, err := store.GetRun(context.Background(), workflowID)
			require.NoError(t, err)
			assert.Equal(t, tc.wantStatus, run.Status)
			require.NotNil(t, run.FinishedAt, "the run's end was recorded")
			for _, text := range []string{run.Answer, run.Reason, run.HandoffNote} {
				assert.True(t, utf8.ValidString(text))
				assert.NotContains(t, text, "\x00")
			}
			assert.Contains(t, run.Answer+run.Reason, tc.want)

			if tc.wantStatus == agentsagatype.RunCompleted {
				require.NoError(t, env.GetWorkflowError())
				var result workflows.RunResult
				require.NoError(t, env.GetWorkflowResult(&result))
				assert.Equal(t, run.Answer, result.Answer, "the ledger holds the answer the run returned")
				return
			}
			var appErr *temporal.ApplicationError
			require.True(t, errors.As(env.GetWorkflowError(), &appErr))
			assert.True(t, utf8.ValidString(appErr.Message()))
			assert.NotContains(t, appErr.Message(), "\x00")
		})
	}
}
