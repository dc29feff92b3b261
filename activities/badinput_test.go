package activities_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/internal/providerwire"
	"github.com/agentsaga/agentsaga/internal/textclip"
	"github.com/agentsaga/agentsaga/internal/toolcheck"
	"github.com/agentsaga/agentsaga/internal/wire"
)

const testWorkflowID = "default-test-workflow-id"

// requireStorable fails unless s can travel everywhere a tool's or model's
// text goes: JSON payloads and protobuf strings in workflow history (valid
// UTF-8) and Postgres text columns (valid UTF-8 without NUL).
func requireStorable(t *testing.T, s string) {
	t.Helper()
	require.True(t, utf8.ValidString(s), "not valid UTF-8: %q", clipForLog(s))
	require.NotContains(t, s, "\x00", "holds a NUL byte")
	encoded, err := json.Marshal(s)
	require.NoError(t, err)
	var decoded string
	require.NoError(t, json.Unmarshal(encoded, &decoded))
	require.Equal(t, s, decoded, "does not survive a JSON round trip unchanged")
}

func clipForLog(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// appError unwraps the activity error to the application error it carries.
func appError(t *testing.T, err error) *temporal.ApplicationError {
	t.Helper()
	var appErr *temporal.ApplicationError
	require.True(t, errors.As(err, &appErr), "not an application error: %v", err)
	return appErr
}

// A tool's answer is data of any size and any bytes. Whatever it is, what
// the model reads (and history carries) is capped with a marker and is
// valid UTF-8, and the ledger stores exactly that, so a replay returns the
// same text; the tool runs once, because storing the result cannot fail.
func TestToolOutputIsCappedAndCleanedBeforeHistoryAndLedger(t *testing.T) {
	t.Parallel()
	huge := strings.Repeat("a", 10<<20)
	atCap := strings.Repeat("b", activities.MaxToolOutput)
	// A two-byte rune straddles the cap: cutting must not leave half of it.
	straddling := strings.Repeat("c", activities.MaxToolOutput-1) + "é" + strings.Repeat("d", 100)
	// Invalid bytes would grow when replaced; the cap applies to the result.
	manyInvalid := strings.Repeat("\x00\xff", activities.MaxToolOutput)

	for name, tc := range map[string]struct {
		output string
		// want is the whole expected output; empty means "check the marker".
		want      string
		truncated bool
	}{
		"huge output":               {output: huge, truncated: true},
		"exactly the cap":           {output: atCap, want: atCap},
		"rune straddles the cap":    {output: straddling, truncated: true},
		"invalid UTF-8":             {output: "ok \xff\xfe\xfd done", want: "ok \uFFFD done"},
		"NUL bytes":                 {output: "a\x00b\x00c", want: "a\uFFFDb\uFFFDc"},
		"truncated UTF-8 at end":    {output: "price: 5 \xe2\x82", want: "price: 5 \uFFFD"},
		"huge and invalid":          {output: manyInvalid, truncated: true},
		"JSON with control escapes": {output: `{"q":"a\u0000b"}`, want: `{"q":"a\u0000b"}`},
	} {
		for _, kind := range []string{agentsagatype.ToolKindGo, agentsagatype.ToolKindHTTP} {
			t.Run(name+"/"+kind, func(t *testing.T) {
				t.Parallel()
				var calls atomic.Int32
				box := activities.NewToolbox()
				box.Register("dump", func(context.Context, activities.ToolInvocation) (string, error) {
					calls.Add(1)
					return tc.output, nil
				})
				ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
					calls.Add(1)
					_, _ = w.Write([]byte(tc.output))
				}))
				defer ts.Close()
				tool := agentsagatype.ToolSpec{Name: "dump", Kind: kind}
				if kind == agentsagatype.ToolKindHTTP {
					tool.URL = ts.URL
				}
				acts := &activities.Activities{Ledger: ledgertest.NewStore(t), Toolbox: box}

				val, err := newEnv(t, acts).ExecuteActivity(acts.CallTool, wire.ToolCallRequest{Tool: tool, Arguments: `{}`})
				require.NoError(t, err)
				var result wire.ToolResult
				require.NoError(t, val.Get(&result))
				requireStorable(t, result.Output)
				assert.Equal(t, int32(1), calls.Load(), "the tool ran once: storing its answer did not fail and force a retry")

				actions, err := acts.Ledger.ListActions(context.Background(), testWorkflowID)
				require.NoError(t, err)
				require.Len(t, actions, 1)
				assert.Equal(t, agentsagatype.ActionCompleted, actions[0].Status)
				stored := actions[0].Result
				requireStorable(t, stored)
				assert.LessOrEqual(t, len(stored), ledgerdb.MaxStoredText)
				if tc.truncated {
					assert.True(t, strings.HasSuffix(stored, activities.TruncationMarker), "the cut is marked for the model")
					assert.LessOrEqual(t, len(stored), activities.MaxToolOutput+len(activities.TruncationMarker))
					assert.Greater(t, len(stored), activities.MaxToolOutput-utf8.UTFMax, "the cut keeps the cap's worth of text")
				} else {
					assert.Equal(t, tc.want, stored)
				}
				// History carries a preview and a digest of exactly what the
				// ledger holds (and the model reads), so a replay matches.
				assert.Equal(t, textclip.Preview(stored), result.Output)
				assert.LessOrEqual(t, len(result.Output), textclip.PreviewBytes)
				assert.Equal(t, textclip.Digest(stored), result.Digest)
				assert.Equal(t, len(stored), result.Bytes)

				// A second delivery of the key replays the stored text.
				val, err = newEnv(t, acts).ExecuteActivity(acts.CallTool, wire.ToolCallRequest{Tool: tool, Arguments: `{}`})
				require.NoError(t, err)
				var replay wire.ToolResult
				require.NoError(t, val.Get(&replay))
				assert.True(t, replay.Replayed)
				assert.Equal(t, result.Output, replay.Output)
				assert.Equal(t, int32(1), calls.Load())
			})
		}
	}
}

// A tool's error text is as untrusted as its output: invalid UTF-8 or a
// NUL in it must not stop the failure from being recorded (a key left
// "started" would block the next attempt until its lease ran out), nor
// make the failure unreadable in history.
func TestToolErrorWithBadBytesIsRecorded(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		tool     func(ts *httptest.Server) agentsagatype.ToolSpec
		status   string
		contains string
	}{
		"go tool, permanent": {
			tool: func(*httptest.Server) agentsagatype.ToolSpec {
				return agentsagatype.ToolSpec{Name: "bad", Kind: agentsagatype.ToolKindGo}
			},
			status: agentsagatype.ActionRejected, contains: "declined \uFFFD",
		},
		"http tool, 400": {
			tool: func(ts *httptest.Server) agentsagatype.ToolSpec {
				return agentsagatype.ToolSpec{Name: "bad", Kind: agentsagatype.ToolKindHTTP, URL: ts.URL + "/400"}
			},
			status: agentsagatype.ActionRejected, contains: "HTTP 400",
		},
		"http tool, 503": {
			tool: func(ts *httptest.Server) agentsagatype.ToolSpec {
				return agentsagatype.ToolSpec{Name: "bad", Kind: agentsagatype.ToolKindHTTP, URL: ts.URL + "/503"}
			},
			status: agentsagatype.ActionFailed, contains: "HTTP 503",
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			box := activities.NewToolbox()
			box.Register("bad", func(context.Context, activities.ToolInvocation) (string, error) {
				return "", activities.Permanent(errors.New("declined \xff\x00 by the bank"))
			})
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				status := http.StatusBadRequest
				if r.URL.Path == "/503" {
					status = http.StatusServiceUnavailable
				}
				w.WriteHeader(status)
				_, _ = w.Write([]byte("no \xff\xfe\x00 way"))
			}))
			defer ts.Close()
			acts := &activities.Activities{Ledger: ledgertest.NewStore(t), Toolbox: box}

			_, err := newEnv(t, acts).ExecuteActivity(acts.CallTool, wire.ToolCallRequest{Tool: tc.tool(ts), Arguments: `{}`})
			require.Error(t, err)
			message := appError(t, err).Message()
			requireStorable(t, message)
			assert.Contains(t, message, tc.contains)

			actions, err := acts.Ledger.ListActions(context.Background(), testWorkflowID)
			require.NoError(t, err)
			require.Len(t, actions, 1)
			assert.Equal(t, tc.status, actions[0].Status, "the failure was recorded, not left in flight")
			requireStorable(t, actions[0].Error)
			assert.NotEmpty(t, actions[0].Error)
			leaves, err := acts.Ledger.ListLeafCalls(context.Background(), testWorkflowID)
			require.NoError(t, err)
			require.Len(t, leaves, 1)
			assert.Equal(t, "error", leaves[0].Outcome, "the leaf call was closed, not left in flight")
		})
	}
}

// Arguments that do not match the tool's schema fail at once, naming the
// tool and the field, before the ledger and before the tool.
func TestToolArgumentsAgainstSchemaNeverReachToolOrLedger(t *testing.T) {
	t.Parallel()
	schema := `{"type":"object","additionalProperties":false,"required":["amount","currency"],
		"properties":{"amount":{"type":"number","minimum":0},"currency":{"enum":["eur","usd"]},
		"note":{"type":"string","maxLength":10}}}`
	var calls atomic.Int32
	box := activities.NewToolbox()
	box.Register("charge", func(context.Context, activities.ToolInvocation) (string, error) {
		calls.Add(1)
		return "charged", nil
	})
	acts := &activities.Activities{Ledger: ledgertest.NewStore(t), Toolbox: box}
	tool := agentsagatype.ToolSpec{Name: "charge", Kind: agentsagatype.ToolKindGo, Parameters: json.RawMessage(schema)}
	require.NoError(t, toolcheck.Validate(tool))
	before := ledgertest.Counts(t, acts.Ledger)

	for name, tc := range map[string]struct{ args, field string }{
		"missing required field": {`{"amount": 5}`, "currency"},
		"wrong type":             {`{"amount": "five", "currency": "eur"}`, "/amount"},
		"below minimum":          {`{"amount": -5, "currency": "eur"}`, "/amount"},
		"not in enum":            {`{"amount": 5, "currency": "btc"}`, "/currency"},
		"unexpected field":       {`{"amount": 5, "currency": "eur", "refund_to": "me"}`, "refund_to"},
		"too long":               {`{"amount": 5, "currency": "eur", "note": "` + strings.Repeat("x", 11) + `"}`, "/note"},
		"an array":               {`[5, "eur"]`, "object"},
		"null":                   {`null`, "object"},
		"not JSON":               {`{"amount": 5,`, "not valid JSON"},
		"empty":                  {``, "not valid JSON"},
		"trailing garbage":       {`{"amount": 5, "currency": "eur"} DROP`, "not valid JSON"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := newEnv(t, acts).ExecuteActivity(acts.CallTool, wire.ToolCallRequest{Tool: tool, Arguments: tc.args})
			require.Error(t, err)
			appErr := appError(t, err)
			assert.Equal(t, wire.ErrTypeInvalidArguments, appErr.Type())
			assert.True(t, appErr.NonRetryable(), "no attempt can fix the arguments")
			assert.Contains(t, appErr.Message(), "tool charge")
			assert.Contains(t, appErr.Message(), tc.field)
		})
	}
	assert.Zero(t, calls.Load(), "the tool never ran")
	assert.Equal(t, before, ledgertest.Counts(t, acts.Ledger), "no action, no leaf call: the ledger is unchanged")
}

// A tool the worker does not have fails at once, naming it and the tools
// the worker does have, before the ledger.
func TestUnknownToolOnTheWorkerNeverReachesTheLedger(t *testing.T) {
	t.Parallel()
	box := activities.NewToolbox()
	box.Register("word_count", func(context.Context, activities.ToolInvocation) (string, error) { return "", nil })
	box.Register("add", func(context.Context, activities.ToolInvocation) (string, error) { return "", nil })
	acts := &activities.Activities{Ledger: ledgertest.NewStore(t), Toolbox: box}
	before := ledgertest.Counts(t, acts.Ledger)

	for name, tc := range map[string]struct {
		tool agentsagatype.ToolSpec
		want []string
	}{
		"unregistered go tool": {agentsagatype.ToolSpec{Name: "delete_everything", Kind: agentsagatype.ToolKindGo},
			[]string{"delete_everything", "registered: add, word_count"}},
		"unknown kind": {agentsagatype.ToolSpec{Name: "sh", Kind: "shell"}, []string{"tool sh", `unknown kind "shell"`}},
		"agent kind":   {agentsagatype.ToolSpec{Name: "helper", Kind: agentsagatype.ToolKindAgent}, []string{"tool helper", `unknown kind "agent"`}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := newEnv(t, acts).ExecuteActivity(acts.CallTool, wire.ToolCallRequest{Tool: tc.tool, Arguments: `{}`})
			require.Error(t, err)
			appErr := appError(t, err)
			assert.Equal(t, wire.ErrTypeUnknownTool, appErr.Type())
			assert.True(t, appErr.NonRetryable())
			for _, want := range tc.want {
				assert.Contains(t, appErr.Message(), want)
			}
		})
	}
	assert.Equal(t, before, ledgertest.Counts(t, acts.Ledger))
}

// fakeChat answers every chat.completions request with status and body: a
// 200's chat.completion as the stream the request asks for, anything else
// (an error, a body that is no completion) as it is.
func fakeChat(t *testing.T, status int, body string) *httptest.Server {
	t.Helper()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		request, _ := io.ReadAll(r.Body)
		if status == http.StatusOK && providerwire.WriteChatCompletion(w, providerwire.Streams(request), []byte(body)) == nil {
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(ts.Close)
	return ts
}

func chatBody(message string) string {
	return fmt.Sprintf(`{"id":"c","object":"chat.completion","created":1,"model":"m",
		"choices":[{"index":0,"message":%s,"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`, message)
}

// A model's answer is untrusted text too: bad bytes in it are replaced, so
// the turn travels through history and into the ledger (a run's answer),
// and an answer that is not a chat completion at all is an error that says
// so. Either way the model call is one closed leaf call and no action.
func TestModelOutputWithBadBytes(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		status  int
		body    string
		content string   // the turn's content, when it succeeds
		args    string   // its first tool call's arguments, if any
		refusal string   // its refusal, if any
		errWant []string // what the error must say, when it fails
	}{
		"invalid UTF-8 in content": {status: 200, body: chatBody("{\"role\":\"assistant\",\"content\":\"total \xff\xfe 5\"}"), content: "total \uFFFD 5"},
		"NUL in content":           {status: 200, body: chatBody(`{"role":"assistant","content":"a\u0000b"}`), content: "a\uFFFDb"},
		"NUL in refusal":           {status: 200, body: chatBody(`{"role":"assistant","content":null,"refusal":"no\u0000"}`), refusal: "no\uFFFD"},
		"invalid UTF-8 in arguments": {status: 200,
			body: chatBody(`{"role":"assistant","content":null,"tool_calls":[{"id":"1","type":"function","function":{"name":"add","arguments":"{\"a\":\"` + "\xff" + `\"}"}}]}`),
			args: "{\"a\":\"\uFFFD\"}"},
		"not JSON":              {status: 200, body: "<html>\xff\x00 gateway</html>", errWant: []string{"openai chat.completions"}},
		"no choices":            {status: 200, body: `{"id":"c","object":"chat.completion","choices":[]}`, errWant: []string{"openai chat.completions", "no choices"}},
		"error body with bytes": {status: 400, body: "{\"error\":\"bad \xff\xfe\x00 request\"}", errWant: []string{"openai chat.completions", "HTTP 400", "bad"}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ts := fakeChat(t, tc.status, tc.body)
			acts := &activities.Activities{Ledger: ledgertest.NewStore(t)}
			val, err := newEnv(t, acts).ExecuteActivity(acts.CallModel, wire.ModelCall{
				Model: agentsagatype.ModelSpec{Provider: agentsagatype.ProviderOpenAI, Name: "m", BaseURL: ts.URL},
				Conversation: wire.Conversation{WorkflowID: testWorkflowID, Through: 1,
					Append: []agentsagatype.Message{{Seq: 0, Role: "user", Content: "hi", Pinned: true}}},
			})
			if len(tc.errWant) > 0 {
				require.Error(t, err)
				message := appError(t, err).Message()
				requireStorable(t, message)
				for _, want := range tc.errWant {
					assert.Contains(t, message, want)
				}
			} else {
				require.NoError(t, err)
				var turn agentsagatype.ModelTurn
				require.NoError(t, val.Get(&turn))
				requireStorable(t, turn.Content)
				requireStorable(t, turn.Refusal)
				assert.Equal(t, tc.content, turn.Content)
				assert.Equal(t, tc.refusal, turn.Refusal)
				if tc.args != "" {
					require.Len(t, turn.ToolCalls, 1)
					requireStorable(t, turn.ToolCalls[0].Arguments)
					assert.Equal(t, tc.args, turn.ToolCalls[0].Arguments)
				}
			}

			// A model turn is an action under its key: its reply is stored
			// there, once, and a failed turn is stored as failed.
			actions, aerr := acts.Ledger.ListModelTurns(context.Background(), testWorkflowID)
			require.NoError(t, aerr)
			require.Len(t, actions, 1)
			if len(tc.errWant) == 0 {
				assert.Equal(t, "completed", actions[0].Status)
			} else {
				assert.NotEqual(t, "completed", actions[0].Status)
			}
			leaves, lerr := acts.Ledger.ListLeafCalls(context.Background(), testWorkflowID)
			require.NoError(t, lerr)
			require.Len(t, leaves, 1)
			want := "ok"
			if len(tc.errWant) > 0 {
				want = "error"
			}
			assert.Equal(t, want, leaves[0].Outcome, "the leaf call was closed, not left in flight")
			requireStorable(t, leaves[0].Error)
		})
	}
}
