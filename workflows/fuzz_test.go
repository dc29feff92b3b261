package workflows_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/activityid"
	"github.com/agentsaga/agentsaga/internal/runbudget"
	"github.com/agentsaga/agentsaga/internal/toolcheck"
	"github.com/agentsaga/agentsaga/workflows"
)

// FuzzParseSpec feeds arbitrary bytes to the spec parser. A rejected spec
// is an error that starts with "spec: " and comes with no half-filled
// spec; an accepted one validates, encodes as the workflow's JSON input
// (the worker decodes exactly that), and parses back to itself, so what
// `agentsaga run` checked is what the workflow runs.
func FuzzParseSpec(f *testing.F) {
	for _, seed := range []string{
		validSpec,
		`
goal: Summarise the refund policy
budget: {steps: 8, tokens: 20000}
model: {provider: openai, name: llama3.1, base_url: "http://localhost:11434/v1"}
tools:
  - name: search
    kind: http
    url: http://localhost:8080/search
    parameters: {type: object, properties: {q: {type: string}}, required: [q]}
`,
		`{"goal": "g", "budget": {"steps": 3, "usd": 0.5, "seconds": 60}, "model": {"provider": "anthropic", "name": "claude-sonnet-4-5", "max_tokens": 512}}`,
		`
goal: refund order A-1
budget: {steps: 5, leaf_calls: 20}
finish_at: 0.25
on_budget_exhausted: compensate
compensation_attempts: 3
escalate: {after_tool_failures: 2}
watchdog: {no_progress_turns: 4, on_fire: escalate}
retry: {max_attempts: 4, tool_retry_cap: 2, tool_retry_caps: {charge: 0}, ratio: 0.1, floor: 2, backoff_base_seconds: 0.1, backoff_cap_seconds: 2}
prices: {tool_call_usd: 0.001, tools: {charge: 0.01}, models: {m: {input_per_million: 1, output_per_million: 2}}}
model:
  provider: scripted
  script:
    - tool_calls: [{name: charge, arguments: {amount: 10}}]
    - {content: done}
  script_finish: {content: partial}
tools:
  - {name: charge, kind: go, compensate: {tool: refund, arguments: {charge_id: "{{result.id}}", key: "{{key}}"}}, refusal: [{field: status, equals: declined}, {pattern: "insufficient funds"}]}
  - {name: refund, kind: http, url: "https://pay.example/refund", method: POST, timeout_seconds: 5}
  - {name: notify, kind: go, irreversible: true}
  - {name: helper, kind: agent}
agents:
  helper: {system: "be brief", tools: [notify], share: 0.5, model: {provider: openai, name: gpt-4o-mini}}
`,
		"goal: g\nbudget: {steps: 3}\nfinish_at: .nan\nmodel: {provider: scripted, script: [{content: x}]}",
		"goal: g\nbudget: {steps: 3}\nretry: {ratio: .inf}\nmodel: {provider: scripted, script: [{content: x}]}",
		"goal: g\nbudget: {steps: 3}\ntools: [{name: a, kind: go, timeout_seconds: 1e300}]\nmodel: {provider: scripted, script: [{content: x}]}",
		"goal: g\nbudget: {steps: 3}\ntools: [{name: a, kind: go, timeout_seconds: 1e-12}]\nmodel: {provider: scripted, script: [{content: x}]}",
		"goal: g\nbudget: {steps: 3, seconds: 1e300}\nretry: {backoff_cap_seconds: 1e300, backoff_base_seconds: 1e299}\nmodel: {provider: scripted, script: [{content: x}]}",
		"goal: g\nbudget: {steps: 3, usd: 1e400}\nmodel: {provider: scripted, script: [{content: x}]}",
		"goal: g\nbudget: {steps: 3}\nmodel: {provider: scripted, script: [{content: x}]}\nagents: {x: {share: 2}}\ntools: [{name: x, kind: agent}]",
		"goal: g\nbudget: {steps: 3}\nmodel: {provider: scripted, script: [{tool_calls: [{arguments: {}}]}]}",
		"goal: g\nbudget: {steps: 3}\nmodel: {provider: scripted, script: [{content: x}]}\ntools: [{name: a, kind: go, compensate: {tool: b}}]",
		"goal: g\ngoal: h\nbudget: {steps: 3}\nmodel: {provider: scripted, script: [{content: x}]}",
		"goal: &a g\nsystem: *a\nbudget: {steps: 3}\nmodel: {provider: scripted, script: [{content: x}]}",
		"goal: g\nbudget: {steps: 3}\nmodel: {provider: openai, name: m, api_key: sk-123}",
		"goal: [unclosed",
		"",
		"null",
		"[]",
		"- 1",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		spec, err := workflows.ParseSpec(data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "spec: ") || len(err.Error()) <= len("spec: ") {
				t.Fatalf("error %q does not say it is about the spec and what is wrong", err)
			}
			if !reflect.DeepEqual(spec, workflows.RunSpec{}) {
				t.Fatalf("a rejected spec came back filled in: %+v", spec)
			}
			return
		}
		if err := spec.Validate(); err != nil {
			t.Fatalf("ParseSpec accepted a spec that does not validate: %v", err)
		}
		if spec.Goal == "" || spec.Budget.Steps <= 0 {
			t.Fatalf("ParseSpec accepted a spec without a goal or a step cap: %+v", spec)
		}
		// Durations derived from the spec stay positive: a conversion that
		// wraps would give every call a negative timeout or backoff.
		for i, tool := range spec.Tools {
			if tool.Timeout() <= 0 {
				t.Fatalf("tools[%d] timeout_seconds %v gives the timeout %v", i, tool.TimeoutSeconds, tool.Timeout())
			}
		}
		if b := spec.Retry.Backoff(); b.Base < 0 || b.Cap < 0 || b.Base > b.Cap {
			t.Fatalf("retry %+v gives the backoff %+v", spec.Retry, b)
		}
		start := time.Unix(1_700_000_000, 0)
		if rb, err := runbudget.NewRunBudget(spec.Budget, 0.2, start); err != nil {
			t.Fatalf("an accepted budget %+v is refused by NewRunBudget: %v", spec.Budget, err)
		} else if d := rb.Deadline(); !d.IsZero() && !d.After(start) {
			t.Fatalf("budget.seconds %v gives the deadline %v, not after the start %v", spec.Budget.Seconds, d, start)
		}

		input, err := json.Marshal(spec)
		if err != nil {
			t.Fatalf("an accepted spec cannot be the workflow's input: %v", err)
		}
		again, err := workflows.ParseSpec(input)
		if err != nil {
			t.Fatalf("the spec as the workflow receives it, %s, does not parse: %v", input, err)
		}
		if !reflect.DeepEqual(again, spec) {
			t.Fatalf("the spec changed on its way to the workflow:\nparsed  %+v\nwent as %s\ncame as %+v", spec, input, again)
		}
	})
}

// FuzzIdempotencyKeys checks the keys the ledger deduplicates by: workflow
// ID + "/" + activity ID, with activity IDs for model turns, tool calls
// and their compensations, and sub-agents running as child workflows whose
// IDs extend the parent's. Two different calls never share a key, and
// every key is namespaced by its workflow ID.
func FuzzIdempotencyKeys(f *testing.F) {
	f.Add("run-42", false, uint8(1), 1, 1, "charge", "run-42", false, uint8(2), 1, 1, "charge")
	f.Add("run-42", false, uint8(1), 1, 12, "x", "run-42", false, uint8(1), 11, 2, "x")
	f.Add("run-42", false, uint8(1), 1, 1, "2-x", "run-42", false, uint8(1), 1, 12, "x")
	f.Add("run-42", false, uint8(0), 1, 0, "", "run-42", false, uint8(1), 1, 0, "model")
	f.Add("run-42", true, uint8(0), 1, 1, "helper", "run-42", false, uint8(2), 1, 1, "helper")
	f.Add("a", false, uint8(2), 1, 1, "x", "a/step-001-call-1-x", false, uint8(3), 0, 0, "")
	f.Add("w", false, uint8(1), -1, 1, "x", "w", false, uint8(1), 1, -1, "x")
	f.Add("w", false, uint8(1), 1000, 1, "x", "w", false, uint8(1), 100, 1, "0-x")
	f.Add("", false, uint8(4), 0, 0, "", "", false, uint8(3), 0, 0, "")
	f.Fuzz(func(t *testing.T,
		wf1 string, child1 bool, kind1 uint8, step1, call1 int, tool1 string,
		wf2 string, child2 bool, kind2 uint8, step2, call2 int, tool2 string,
	) {
		a := call{workflowID: wf1, kind: kind1 % 5, step: step1, call: call1, tool: toolName(tool1)}
		b := call{workflowID: wf2, kind: kind2 % 5, step: step2, call: call2, tool: toolName(tool2)}
		if child1 {
			// The same call, made by a sub-agent that the parent's call
			// step1/call1 started.
			a.workflowID = wf1 + "/" + activityid.Tool(step1, call1, a.tool)
		}
		if child2 {
			b.workflowID = wf2 + "/" + activityid.Tool(step2, call2, b.tool)
		}
		a, b = a.normalize(), b.normalize()
		keyA, keyB := a.key(), b.key()
		for _, c := range []call{a, b} {
			key, id := c.key(), c.activityID()
			if rest, ok := strings.CutPrefix(key, c.workflowID+"/"); !ok || rest != id {
				t.Fatalf("key %q is not workflow ID %q + / + activity ID %q", key, c.workflowID, id)
			}
		}
		if keyA == keyB && a != b {
			t.Fatalf("two calls share the key %q:\n%+v (activity %q)\n%+v (activity %q)", keyA, a, a.activityID(), b, b.activityID())
		}
		if a.workflowID == b.workflowID && a != b && a.activityID() == b.activityID() {
			t.Fatalf("two calls of workflow %q share the activity ID %q", a.workflowID, a.activityID())
		}
	})
}

// call is one activity a run can schedule.
type call struct {
	workflowID string
	kind       uint8 // 0 model turn, 1 tool call, 2 its compensation, 3 run start, 4 run finish
	step, call int
	tool       string
}

func (c call) activityID() string {
	switch c.kind {
	case 0:
		return activityid.Model(c.step)
	case 1:
		return activityid.Tool(c.step, c.call, c.tool)
	case 2:
		return activityid.Compensation(activityid.Tool(c.step, c.call, c.tool), 0)
	case 3:
		return "run-start"
	}
	return "run-finish"
}

func (c call) key() string { return c.workflowID + "/" + c.activityID() }

// normalize drops the fields an activity ID does not use, so that two
// calls compare equal exactly when they are the same call.
func (c call) normalize() call {
	switch c.kind {
	case 0:
		c.call, c.tool = 0, ""
	case 3, 4:
		c.step, c.call, c.tool = 0, 0, ""
	}
	return c
}

// toolName turns arbitrary text into a name toolcheck.Validate accepts, so
// that every input exercises the key grammar instead of being skipped.
func toolName(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r == '_' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' {
			b.WriteRune(r)
		}
	}
	name := b.String()
	if len(name) > 64 {
		name = name[:64]
	}
	if name == "" {
		name = "t"
	}
	if err := toolcheck.Validate(agentsagatype.ToolSpec{Name: name, Kind: agentsagatype.ToolKindGo}); err != nil {
		panic("toolName made an invalid name: " + err.Error())
	}
	return name
}
