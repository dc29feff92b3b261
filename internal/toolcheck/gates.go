package toolcheck

import (
	"encoding/json"
	"fmt"
	"sync"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/argrule"
)

// Gates are what stands between a model's call of a tool and the act: the
// approval rule in force and the limits on the arguments, compiled
// (ARCHITECTURE.md decision 14). The workflow evaluates them before a call is sent;
// the expressions are pure, so replay gives the same answers.
type Gates struct {
	// Approval is the rule in force: the spec's, or "always" for an
	// irreversible tool that states none; nil when no call waits.
	Approval  *agentsagatype.ApprovalSpec
	condition *argrule.Rule // nil for "always"
	// Calls are the per-call limits, Sums the per-run ones.
	Calls []Limit
	Sums  []Limit
}

// Limit is one compiled limit.
type Limit struct {
	agentsagatype.LimitSpec
	Rule *argrule.Rule
}

var gatesCache sync.Map // what compiling depends on, as JSON -> Gates

// CompileGates compiles the tool's approval rule and limits against its
// parameter schema, naming the field of the first one that is wrong. A
// tool's gates are compiled once per process: workflow code calls this on
// every call, and building a CEL environment takes milliseconds, more
// under -race, inside a workflow task that must yield within a second.
func CompileGates(t agentsagatype.ToolSpec) (Gates, error) {
	if t.Approval == nil && len(t.Limits) == 0 && !t.Irreversible {
		return Gates{}, nil
	}
	key, err := json.Marshal([]any{t.Name, t.Kind, t.Irreversible, t.Approval, t.Limits, t.Parameters})
	if err != nil {
		return Gates{}, fmt.Errorf("tool %s: approval and limits: %w", t.Name, err)
	}
	if cached, ok := gatesCache.Load(string(key)); ok {
		return cached.(Gates), nil
	}
	g, err := compileGates(t)
	if err == nil {
		gatesCache.Store(string(key), g)
	}
	return g, err
}

func compileGates(t agentsagatype.ToolSpec) (Gates, error) {
	var g Gates
	if t.Kind == agentsagatype.ToolKindAgent && (t.Approval != nil || len(t.Limits) > 0) {
		return g, fmt.Errorf("tool %s: approval and limits apply to the tools a sub-agent calls, not to the sub-agent", t.Name)
	}
	approval := t.Approval
	if approval == nil && t.Irreversible {
		approval = &agentsagatype.ApprovalSpec{When: agentsagatype.ApprovalAlways}
	}
	if approval != nil {
		if err := approval.Validate(); err != nil {
			return g, fmt.Errorf("tool %s: %w", t.Name, err)
		}
		switch approval.When {
		case agentsagatype.ApprovalNever:
		case agentsagatype.ApprovalAlways:
			g.Approval = approval
		default:
			rule, err := argrule.Condition(approval.When, t.Parameters)
			if err != nil {
				return g, fmt.Errorf("tool %s: approval.when: %w", t.Name, err)
			}
			g.Approval, g.condition = approval, rule
		}
	}
	for i, l := range t.Limits {
		if err := l.Validate(); err != nil {
			return g, fmt.Errorf("tool %s: limits[%d]: %w", t.Name, i, err)
		}
		if l.Call != "" {
			rule, err := argrule.Condition(l.Call, t.Parameters)
			if err != nil {
				return g, fmt.Errorf("tool %s: limits[%d].call: %w", t.Name, i, err)
			}
			g.Calls = append(g.Calls, Limit{l, rule})
			continue
		}
		rule, err := argrule.Amount(l.RunSum, t.Parameters)
		if err != nil {
			return g, fmt.Errorf("tool %s: limits[%d].run_sum: %w", t.Name, i, err)
		}
		g.Sums = append(g.Sums, Limit{l, rule})
	}
	return g, nil
}

// Any reports whether the tool has a gate at all.
func (g Gates) Any() bool { return g.Approval != nil || len(g.Calls) > 0 || len(g.Sums) > 0 }

// ApprovalWhy says why a call with these arguments needs a human's
// approval, or "" when it does not. A condition that cannot be evaluated
// (an argument left out) asks a human rather than letting the call pass.
func (g Gates) ApprovalWhy(tool, arguments string) string {
	switch {
	case g.Approval == nil:
		return ""
	case g.condition == nil:
		return "tool " + tool + " needs approval for every call"
	}
	holds, err := g.condition.Holds(arguments)
	switch {
	case err != nil:
		return fmt.Sprintf("tool %s needs approval when %s, and that could not be checked: %v", tool, g.condition, err)
	case holds:
		return fmt.Sprintf("tool %s needs approval when %s", tool, g.condition)
	}
	return ""
}

// Broken says why a call breaks this per-call limit, or "" when it meets
// it. A limit that cannot be evaluated is broken: a limit never lets an
// unknown through.
func (l Limit) Broken(arguments string) string {
	holds, err := l.Rule.Holds(arguments)
	switch {
	case err != nil:
		return fmt.Sprintf("the limit %s could not be checked: %v", l.Call, err)
	case !holds:
		return "the arguments break the limit " + l.Call
	}
	return ""
}
