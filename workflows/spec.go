package workflows

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"sigs.k8s.io/yaml"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/internal/payload"
	"github.com/agentsaga/agentsaga/internal/toolcheck"
)

// RunSpec is everything a run needs: the goal, the model, the tools and the
// budget. It is the AgentRun workflow's input, so it must hold no secrets.
type RunSpec struct {
	// Version is SpecVersion once Resolve wrote every default out; 0 for a
	// spec as written.
	Version int    `json:"spec_version,omitempty"`
	Goal    string `json:"goal"`
	// System replaces the default system prompt.
	System string                   `json:"system,omitempty"`
	Model  agentsagatype.ModelSpec  `json:"model"`
	Tools  []agentsagatype.ToolSpec `json:"tools,omitempty"`
	Budget budget.Limits            `json:"budget"`
	// FinishAt is the fraction of budget left at which the run switches to
	// its graceful finish; the default is 0.2.
	FinishAt float64 `json:"finish_at,omitempty"`
	// Retry holds the per-call, per-tool and run retry allowances.
	Retry  budget.RetryPolicy `json:"retry,omitempty"`
	Prices budget.Prices      `json:"prices,omitempty"`
	// OnBudgetExhausted is "keep" (the default: keep what was done and hand
	// off) or "compensate" (roll the run's actions back).
	OnBudgetExhausted string `json:"on_budget_exhausted,omitempty"`
	// Escalate says when a run pauses for a human besides a refusal, a
	// permission error and an open breaker.
	Escalate EscalationSpec `json:"escalate,omitempty"`
	// CompensationAttempts bounds each compensation's own retries (default
	// 5); they are outside the retry budget.
	CompensationAttempts int `json:"compensation_attempts,omitempty"`
	// Watchdog configures the no-progress watchdog.
	Watchdog WatchdogSpec `json:"watchdog,omitempty"`
	// Agents defines the sub-agents that tools of kind "agent" run.
	Agents map[string]AgentSpec `json:"agents,omitempty"`
	// SearchAttributes turns on the typed search attributes the Temporal UI
	// filters by; `agentsaga run` sets it when the namespace has them.
	SearchAttributes bool `json:"search_attributes,omitempty"`
	// History bounds the workflow's history: the run continues as new
	// before it grows past it.
	History HistorySpec `json:"history,omitempty"`
	// Priority orders the admission queue of the run's account: 1 goes
	// first, 5 last; 0 means DefaultPriority. It is Temporal's task
	// priority too, where the server honours it.
	Priority int `json:"priority,omitempty"`

	// Carried is the state a run continued as new carries into its next
	// execution. The engine sets it; a spec never does.
	Carried *Carried `json:"carried,omitempty"`
}

// HistorySpec bounds a run's workflow history.
type HistorySpec struct {
	// MaxEvents continues the run as new once its history holds this many
	// events (default 1000), or sooner when Temporal suggests.
	MaxEvents int `json:"max_events,omitempty"`
}

// defaultMaxEvents is history.max_events when the spec sets none: well
// under Temporal's own suggestion, so a turn's events never push past it.
const defaultMaxEvents = 1000

// AgentSpec is a sub-agent: a child run with its own instructions and a
// subset of the parent's tools, spending an allocation carved out of the
// parent's remaining budget.
type AgentSpec struct {
	System string `json:"system,omitempty"`
	// Model defaults to the parent's.
	Model *agentsagatype.ModelSpec `json:"model,omitempty"`
	// Tools names the parent's tools the sub-agent may use.
	Tools []string `json:"tools,omitempty"`
	// Share is the fraction of the parent's remaining budget each call gets
	// (default 0.25).
	Share float64 `json:"share,omitempty"`
}

// EscalationSpec configures escalation to a human.
type EscalationSpec struct {
	// AfterToolFailures escalates when one tool has failed this many
	// times in the run; zero means never for this reason.
	AfterToolFailures int `json:"after_tool_failures,omitempty"`
	// AfterBreakerOpenSeconds is how long a call waits, parked, behind its
	// dependency's open circuit breaker before the run asks a human
	// (default 300). A spec resolved before parking existed carries 0 and
	// keeps escalating at the first refusal.
	AfterBreakerOpenSeconds int `json:"after_breaker_open_seconds,omitempty"`
	// Timeout (a Go duration, 24h) bounds the wait for a human's resume or
	// abort; OnTimeout says what follows it: agentsagatype.OnTimeoutAbort
	// (the default), OnTimeoutFinish or OnTimeoutResume; RemindEvery
	// publishes a reminder each period while the run waits. A spec resolved
	// at version 4 or later carries 24h and abort
	// where it set none; one resolved before carries neither, and its
	// escalations wait, as they did, until the run's deadline, if it has
	// one. The run's deadline bounds the wait too, whichever comes first.
	Timeout     string `json:"timeout,omitempty"`
	OnTimeout   string `json:"on_timeout,omitempty"`
	RemindEvery string `json:"remind_every,omitempty"`
}

// defaultEscalationTimeout is escalate.timeout when a new spec sets none:
// a working day and a night, as an approval's.
const defaultEscalationTimeout = 24 * time.Hour

// timeout is how long an escalation waits for a human; 0 for no limit of
// its own (a spec resolved before version 4).
func (e EscalationSpec) timeout() time.Duration {
	d, _ := time.ParseDuration(e.Timeout)
	return max(d, 0)
}

// reminders is the period of an escalation's reminders; 0 for none.
func (e EscalationSpec) reminders() time.Duration {
	d, _ := time.ParseDuration(e.RemindEvery)
	return max(d, 0)
}

func (e EscalationSpec) validate() error {
	switch e.OnTimeout {
	case "", agentsagatype.OnTimeoutAbort, agentsagatype.OnTimeoutFinish, agentsagatype.OnTimeoutResume:
	case agentsagatype.OnTimeoutDeny:
		return fmt.Errorf("escalate.on_timeout: %q applies to an approval; an escalation that times out is %q (the default: the run compensates), %q (a partial answer and a handoff note) or %q (the run goes on, no budget added)",
			e.OnTimeout, agentsagatype.OnTimeoutAbort, agentsagatype.OnTimeoutFinish, agentsagatype.OnTimeoutResume)
	default:
		return fmt.Errorf("escalate.on_timeout: %q is not %q (the default), %q or %q",
			e.OnTimeout, agentsagatype.OnTimeoutAbort, agentsagatype.OnTimeoutFinish, agentsagatype.OnTimeoutResume)
	}
	timeout := e.timeout()
	if e.Timeout == "" {
		timeout = defaultEscalationTimeout
	}
	return agentsagatype.ValidateDeadline("escalate", e.Timeout, e.RemindEvery, timeout)
}

// OnBudgetExhausted values.
const (
	OnBudgetKeep       = "keep"
	OnBudgetCompensate = "compensate"
)

// ParseSpec reads a run spec from YAML or JSON. Unknown fields and
// duplicate keys are errors, so a typo or a pasted-over value is reported
// rather than ignored.
func ParseSpec(data []byte) (RunSpec, error) {
	asJSON, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return RunSpec{}, fmt.Errorf("spec: not valid YAML or JSON: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(asJSON))
	dec.DisallowUnknownFields()
	var spec RunSpec
	if err := dec.Decode(&spec); err != nil {
		return RunSpec{}, fmt.Errorf("spec: %w", err)
	}
	if spec.Carried != nil {
		return RunSpec{}, fmt.Errorf("spec: carried: is the state a run carries across continue-as-new; only the engine sets it")
	}
	if err := spec.Validate(); err != nil {
		return RunSpec{}, fmt.Errorf("spec: %w", err)
	}
	return spec, nil
}

// ReadSpec parses the spec file at path.
func ReadSpec(path string) (RunSpec, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return RunSpec{}, fmt.Errorf("spec: %w", err)
	}
	spec, err := ParseSpec(data)
	if err != nil {
		return RunSpec{}, fmt.Errorf("%s: %w", path, err)
	}
	return spec, nil
}

// Validate reports the first thing wrong with the spec, naming the field.
func (s RunSpec) Validate() error { return s.ValidateFor() }

// ValidateFor is Validate for a fleet whose workers also register the
// custom model providers named (activities.Models.Register, on the workers).
func (s RunSpec) ValidateFor(providers ...string) error {
	if s.Goal == "" {
		return fmt.Errorf("goal: missing")
	}
	if field := nulField(s); field != "" {
		return fmt.Errorf("%s: contains a NUL character (\\u0000), which the ledger cannot store", field)
	}
	if err := s.Model.ValidateFor(providers...); err != nil {
		return err
	}
	if err := s.Budget.Validate(); err != nil {
		return err
	}
	if s.Priority < 0 || s.Priority > 5 {
		return fmt.Errorf("priority: %d is outside 1 to 5 (1 goes first)", s.Priority)
	}
	if s.FinishAt != 0 && (s.FinishAt <= 0 || s.FinishAt >= 1) {
		return fmt.Errorf("finish_at: %v is outside (0, 1)", s.FinishAt)
	}
	if err := s.Retry.Validate(); err != nil {
		return err
	}
	if err := s.Prices.Validate(); err != nil {
		return err
	}
	if err := s.pricedForTheAccount(); err != nil {
		return err
	}
	switch s.OnBudgetExhausted {
	case "", OnBudgetKeep, OnBudgetCompensate:
	default:
		return fmt.Errorf("on_budget_exhausted: %q is not %q or %q", s.OnBudgetExhausted, OnBudgetKeep, OnBudgetCompensate)
	}
	if s.Escalate.AfterBreakerOpenSeconds < 0 {
		return fmt.Errorf("escalate.after_breaker_open_seconds: %d must not be negative (it is how long a call waits behind an open breaker; default %d)",
			s.Escalate.AfterBreakerOpenSeconds, DefaultBreakerOpenEscalation)
	}
	if s.Escalate.AfterToolFailures < 0 || s.CompensationAttempts < 0 {
		return fmt.Errorf("escalate.after_tool_failures and compensation_attempts must not be negative")
	}
	if err := s.Escalate.validate(); err != nil {
		return err
	}
	seen := map[string]bool{}
	for i, tool := range s.Tools {
		if err := toolcheck.Validate(tool); err != nil {
			return fmt.Errorf("tools[%d]: %w", i, err)
		}
		if seen[tool.Name] {
			return fmt.Errorf("tools[%d]: a tool named %q is declared twice", i, tool.Name)
		}
		seen[tool.Name] = true
	}
	for i, tool := range s.Tools {
		if tool.Compensate != nil && !seen[tool.Compensate.Tool] {
			return fmt.Errorf("tools[%d]: tool %s: compensate.tool %q is not a declared tool", i, tool.Name, tool.Compensate.Tool)
		}
		if _, ok := s.Agents[tool.Name]; tool.Kind == agentsagatype.ToolKindAgent && !ok {
			return fmt.Errorf("tools[%d]: tool %s is of kind agent but agents.%s is not defined", i, tool.Name, tool.Name)
		}
	}
	for name, agent := range s.Agents {
		if tool, ok := s.tool(name); !ok || tool.Kind != agentsagatype.ToolKindAgent {
			return fmt.Errorf("agents.%s: no tool of kind agent is named %s", name, name)
		}
		if agent.Share < 0 || agent.Share > 1 {
			return fmt.Errorf("agents.%s.share: %v is outside (0, 1]", name, agent.Share)
		}
		if agent.Model != nil {
			if err := agent.Model.ValidateFor(providers...); err != nil {
				return fmt.Errorf("agents.%s.%w", name, err)
			}
		}
		for _, t := range agent.Tools {
			tool, ok := s.tool(t)
			if !ok {
				return fmt.Errorf("agents.%s.tools: %q is not a declared tool", name, t)
			}
			if tool.Kind == agentsagatype.ToolKindAgent {
				return fmt.Errorf("agents.%s.tools: %q is a sub-agent; sub-agents do not nest", name, t)
			}
		}
	}
	switch s.Watchdog.OnFire {
	case "", WatchdogFinish, WatchdogEscalate:
	default:
		return fmt.Errorf("watchdog.on_fire: %q is not %q or %q", s.Watchdog.OnFire, WatchdogFinish, WatchdogEscalate)
	}
	if s.Carried == nil {
		// A spec is a workflow input: it must leave room under the payload
		// limit for what a run carries with it.
		if err := payload.Check("the spec", s); err != nil {
			var appErr *temporal.ApplicationError
			if errors.As(err, &appErr) {
				return fmt.Errorf("%s (put long instructions in a tool the model can call)", appErr.Message())
			}
			return err
		}
	}
	if s.History.MaxEvents < 0 || (s.History.MaxEvents > 0 && s.History.MaxEvents < 100) {
		return fmt.Errorf("history.max_events: %d is too few (at least 100: a turn alone takes a dozen events)", s.History.MaxEvents)
	}
	if s.Watchdog.NoProgressTurns < 0 {
		return fmt.Errorf("watchdog.no_progress_turns: %d is negative", s.Watchdog.NoProgressTurns)
	}
	return nil
}

// nulField names the first field of the spec, in sorted order so the
// answer is deterministic, whose text holds a NUL: Postgres stores the spec
// as jsonb and the goal as text, and both reject it, so such a run could
// never record its start.
func nulField(s RunSpec) string {
	encoded, err := json.Marshal(s)
	if err != nil || !bytes.Contains(encoded, []byte(`\u0000`)) {
		return ""
	}
	var tree any
	if json.Unmarshal(encoded, &tree) != nil {
		return "spec"
	}
	var walk func(path string, v any) string
	walk = func(path string, v any) string {
		switch v := v.(type) {
		case string:
			if strings.ContainsRune(v, 0) {
				return path
			}
		case []any:
			for i, item := range v {
				if found := walk(fmt.Sprintf("%s[%d]", path, i), item); found != "" {
					return found
				}
			}
		case map[string]any:
			for _, key := range slices.Sorted(maps.Keys(v)) {
				field := key
				if path != "" {
					field = path + "." + key
				}
				if strings.ContainsRune(key, 0) {
					return field
				}
				if found := walk(field, v[key]); found != "" {
					return found
				}
			}
		}
		return ""
	}
	if found := walk("", tree); found != "" {
		return found
	}
	return "spec"
}

// The defaults of budget.finish_at and compensation_attempts.
const (
	defaultFinishAt             = 0.2
	defaultCompensationAttempts = 5
)

func (s RunSpec) tool(name string) (agentsagatype.ToolSpec, bool) {
	for _, t := range s.Tools {
		if t.Name == name {
			return t, true
		}
	}
	return agentsagatype.ToolSpec{}, false
}

// pricedForTheAccount refuses a run charged to an account (budget.account)
// whose models could cost money it cannot bound: each model the run or
// its sub-agents may call must have a price (prices.models) and a
// max_tokens, or a turn's reservation would be no upper bound of its
// cost. The scripted model costs nothing.
func (s RunSpec) pricedForTheAccount() error {
	if s.Budget.Account == "" {
		return nil
	}
	for _, m := range s.models() {
		if m.Provider == agentsagatype.ProviderScripted {
			continue
		}
		if _, priced := s.modelPrice(m); !priced {
			return fmt.Errorf("budget.account %s: model %s has no price in prices.models, nor in the default table (%s); a run charged to an account must price every model it may call",
				s.Budget.Account, m.Target(), budget.DefaultPricesSource())
		}
		if m.MaxTokens <= 0 {
			return fmt.Errorf("budget.account %s: model %s has no max_tokens; a run charged to an account must bound every reply", s.Budget.Account, m.Target())
		}
	}
	return nil
}

// models are every model the run or its sub-agents may call, fallbacks
// included.
func (s RunSpec) models() []agentsagatype.ModelSpec {
	models := append([]agentsagatype.ModelSpec{s.Model}, s.Model.Fallbacks...)
	for _, agent := range s.Agents {
		if agent.Model != nil {
			models = append(models, *agent.Model)
			models = append(models, agent.Model.Fallbacks...)
		}
	}
	return models
}

// modelPrice is m's price: the spec's, else the default table's.
func (s RunSpec) modelPrice(m agentsagatype.ModelSpec) (budget.ModelPrice, bool) {
	if price, ok := s.Prices.Models[m.Name]; ok {
		return price, true
	}
	return budget.DefaultModelPrice(m.Provider, m.Name)
}

// withDefaultPrices is the spec's prices with the default table's price
// of each model the spec does not price: Resolve writes them out, so a
// run keeps the prices it started with.
func (s RunSpec) withDefaultPrices() budget.Prices {
	prices := s.Prices
	for _, m := range s.models() {
		if _, priced := prices.Models[m.Name]; priced {
			continue
		}
		if price, known := budget.DefaultModelPrice(m.Provider, m.Name); known {
			prices.Models = maps.Clone(prices.Models)
			if prices.Models == nil {
				prices.Models = map[string]budget.ModelPrice{}
			}
			prices.Models[m.Name] = price
		}
	}
	return prices
}
