package workflows

import (
	"fmt"
	"slices"

	"github.com/agentsaga/agentsaga/agentsagatype"
)

// SpecVersion is the version of the resolved spec Resolve writes: a run
// whose input carries it never reads a default from the code it runs on,
// so a deploy that changes a default cannot change what a run in flight
// does. A spec of version 0 was not resolved (a run started before
// versioned specs, or by a caller that passed a spec straight to Temporal):
// the workflow validates and resolves it as it always did.
//
// Version 2 added escalate.after_breaker_open_seconds: a spec of version 1
// carries 0 there, and its run escalates at a breaker's first refusal, as
// it did when it was resolved.
//
// Version 3 writes out the default price table's price of each model the
// spec does not price (budget.DefaultModelPrice): a spec of version 2
// priced such a model at nothing, and its run still does.
//
// Version 4 gave every wait for a person a deadline with a safe default
// (issue 44): an approval rule that names no on_timeout denies the call
// when its timeout passes (written out; a rule the spec does not write,
// an irreversible tool's or an approvable limit's, takes deny from the
// version), and escalate carries timeout 24h and on_timeout abort. A spec
// of version 3 or before keeps what it had: its approvals escalate when
// they time out, and its escalations wait until the run's deadline.
const SpecVersion = 4

// Resolve validates s and returns it with every default written out, at
// SpecVersion: what the client hands the workflow. Call it before the run
// starts; the workflow trusts a resolved spec and does not validate it
// again, so tightening validation never breaks a run in flight.
func (s RunSpec) Resolve() (RunSpec, error) { return s.ResolveFor() }

// withRunDefaults writes out the default of each field the workflow reads,
// where the spec leaves it zero. Resolve writes them for the client, and
// the workflow once more as each execution starts (newRun), for a spec no
// client resolved (version 0) and one resolved before a field existed; no
// use site applies a default again. escalate.after_breaker_open_seconds is
// the exception: a spec resolved at version 1, before parking, carries 0,
// which meant to escalate at the first refusal.
func (s RunSpec) withRunDefaults() RunSpec {
	if s.System == "" {
		s.System = defaultSystemPrompt
	}
	if s.FinishAt <= 0 {
		s.FinishAt = defaultFinishAt
	}
	s.Retry = s.Retry.WithDefaults()
	if s.CompensationAttempts <= 0 {
		s.CompensationAttempts = defaultCompensationAttempts
	}
	if s.Watchdog.NoProgressTurns == 0 {
		s.Watchdog.NoProgressTurns = defaultNoProgressTurns
	}
	if s.Version == 0 && s.Escalate.AfterBreakerOpenSeconds == 0 {
		s.Escalate.AfterBreakerOpenSeconds = DefaultBreakerOpenEscalation
	}
	if s.History.MaxEvents == 0 {
		s.History.MaxEvents = defaultMaxEvents
	}
	if s.Version == 0 || s.Version >= 4 {
		// Before version 4 an escalation had no timeout of its own.
		if s.Escalate.Timeout == "" {
			s.Escalate.Timeout = defaultEscalationTimeout.String()
		}
		if s.Escalate.OnTimeout == "" {
			s.Escalate.OnTimeout = agentsagatype.OnTimeoutAbort
		}
	}
	return s
}

// approvalOnTimeout is what follows the timeout of an approval whose rule
// names no on_timeout: deny for a spec of version 4 or later (and one no
// client resolved), escalate for one resolved before. Resolve writes it
// into the rules a spec writes; this is the default of those it does not
// (an irreversible tool's, an approvable limit's).
func (s RunSpec) approvalOnTimeout(rule agentsagatype.ApprovalSpec) string {
	switch {
	case rule.OnTimeout != "":
		return rule.OnTimeout
	case s.Version == 0 || s.Version >= 4:
		return agentsagatype.OnTimeoutDeny
	}
	return agentsagatype.ApprovalTimeoutEscalate
}

// ResolveFor is Resolve for a fleet whose workers also register the custom
// model providers named.
func (s RunSpec) ResolveFor(providers ...string) (RunSpec, error) {
	if err := s.ValidateFor(providers...); err != nil {
		return RunSpec{}, fmt.Errorf("spec: %w", err)
	}
	if s.Version != 0 {
		return s, nil
	}
	r := s.withRunDefaults()
	r.Version = SpecVersion
	if r.OnBudgetExhausted == "" {
		r.OnBudgetExhausted = OnBudgetKeep
	}
	if r.Watchdog.OnFire == "" {
		r.Watchdog.OnFire = WatchdogFinish
	}
	r.Model = resolveModel(s.Model)
	if slices.ContainsFunc(s.Tools, func(t agentsagatype.ToolSpec) bool { return t.Approval != nil && t.Approval.OnTimeout == "" }) {
		r.Tools = slices.Clone(s.Tools)
		for i, t := range r.Tools {
			if t.Approval != nil && t.Approval.OnTimeout == "" {
				rule := *t.Approval
				rule.OnTimeout = agentsagatype.OnTimeoutDeny
				r.Tools[i].Approval = &rule
			}
		}
	}
	r.Prices = s.withDefaultPrices()
	if len(s.Agents) > 0 {
		r.Agents = make(map[string]AgentSpec, len(s.Agents))
		for name, agent := range s.Agents {
			if agent.Share == 0 {
				agent.Share = defaultShare
			}
			if agent.System == "" {
				agent.System = defaultSystemPrompt
			}
			if agent.Model != nil {
				m := resolveModel(*agent.Model)
				agent.Model = &m
			}
			r.Agents[name] = agent
		}
	}
	return r, nil
}

// resolveModel writes out the model's context window, which the worker
// would otherwise look up by the model's name in its own table.
func resolveModel(m agentsagatype.ModelSpec) agentsagatype.ModelSpec {
	if m.ContextWindow == 0 {
		m.ContextWindow = m.KnownContextWindow()
	}
	if len(m.Fallbacks) > 0 {
		m.Fallbacks = slices.Clone(m.Fallbacks)
		for i, fallback := range m.Fallbacks {
			m.Fallbacks[i] = resolveModel(fallback)
		}
	}
	return m
}
