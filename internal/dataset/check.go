package dataset

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/argrule"
	"github.com/agentsaga/agentsaga/internal/replayreport"
)

// Check is one thing a replay of an entry must show; exactly one field is
// set. Written by hand in the dataset file, for example
//
//	{"must_not_call": {"tool": "payout", "when": "amount > 1000"}}
//	{"answer_contains": "paid 40"}
type Check struct {
	MustCall       *CallCheck `json:"must_call,omitempty"`
	MustNotCall    *CallCheck `json:"must_not_call,omitempty"`
	AnswerContains string     `json:"answer_contains,omitempty"`
	AnswerMatches  string     `json:"answer_matches,omitempty"`
	Status         string     `json:"status,omitempty"`
	MaxSteps       int        `json:"max_steps,omitempty"`
	MaxUSD         float64    `json:"max_usd,omitempty"`
}

// CallCheck names the calls a check counts: those the candidate's model
// asked for of Tool, whose arguments meet When (a CEL expression over
// them, as a tool's approval rule is: amount > 100), and, when Approved is
// set, whose approval was (true) or was not (false) granted.
type CallCheck struct {
	Tool     string `json:"tool"`
	When     string `json:"when,omitempty"`
	Approved *bool  `json:"approved,omitempty"`
}

// Result is one check's outcome.
type Result struct {
	Check  string `json:"check"`
	Passed bool   `json:"passed"`
	Detail string `json:"detail,omitempty"` // why it failed
}

// Name is the check as one line: must_not_call payout when amount > 1000.
func (c Check) Name() string {
	call := func(kind string, cc *CallCheck) string {
		s := kind + " " + cc.Tool
		if cc.When != "" {
			s += " when " + cc.When
		}
		if cc.Approved != nil {
			s += fmt.Sprintf(" approved=%t", *cc.Approved)
		}
		return s
	}
	switch {
	case c.MustCall != nil:
		return call("must_call", c.MustCall)
	case c.MustNotCall != nil:
		return call("must_not_call", c.MustNotCall)
	case c.AnswerContains != "":
		return fmt.Sprintf("answer_contains %q", c.AnswerContains)
	case c.AnswerMatches != "":
		return fmt.Sprintf("answer_matches /%s/", c.AnswerMatches)
	case c.Status != "":
		return "status " + c.Status
	case c.MaxSteps != 0:
		return fmt.Sprintf("max_steps %d", c.MaxSteps)
	default:
		return fmt.Sprintf("max_usd %g", c.MaxUSD)
	}
}

func (c Check) validate() error {
	set := 0
	for _, on := range []bool{c.MustCall != nil, c.MustNotCall != nil, c.AnswerContains != "", c.AnswerMatches != "", c.Status != "",
		c.MaxSteps != 0, c.MaxUSD != 0} {
		if on {
			set++
		}
	}
	if set != 1 {
		return fmt.Errorf("a check sets exactly one of must_call, must_not_call, answer_contains, answer_matches, status, max_steps, max_usd; this one sets %d", set)
	}
	for _, cc := range []*CallCheck{c.MustCall, c.MustNotCall} {
		if cc != nil && cc.Tool == "" {
			return errors.New("a call check names its tool")
		}
	}
	if c.AnswerMatches != "" {
		if _, err := regexp.Compile(c.AnswerMatches); err != nil {
			return fmt.Errorf("answer_matches: %w", err)
		}
	}
	if c.MaxSteps < 0 || c.MaxUSD < 0 {
		return errors.New("max_steps and max_usd are positive")
	}
	return nil
}

// Evaluate runs e's checks against candidate, the replay as the ledger
// recorded it. A when that does not compile against the tool's parameters
// in e's spec fails its check, saying why.
func Evaluate(e Entry, candidate replayreport.Run) []Result {
	out := make([]Result, 0, len(e.Checks))
	for _, c := range e.Checks {
		r := Result{Check: c.Name(), Passed: true}
		fail := func(format string, args ...any) { r.Passed, r.Detail = false, fmt.Sprintf(format, args...) }
		switch {
		case c.MustCall != nil, c.MustNotCall != nil:
			cc := c.MustCall
			if cc == nil {
				cc = c.MustNotCall
			}
			hits, err := matching(e, cc, everyCall("", candidate.Calls))
			switch {
			case err != nil:
				fail("%v", err)
			case c.MustCall != nil && len(hits) == 0:
				fail("no such call")
			case c.MustNotCall != nil && len(hits) > 0:
				h := hits[0]
				fail("turn %s called %s %s%s", h.turn, h.Tool, clip(h.Arguments, 80), approvalNote(h.Call))
			}
		case c.AnswerContains != "":
			if !strings.Contains(candidate.Answer, c.AnswerContains) {
				fail("answer %q", clip(candidate.Answer, 80))
			}
		case c.AnswerMatches != "":
			if !regexp.MustCompile(c.AnswerMatches).MatchString(candidate.Answer) {
				fail("answer %q", clip(candidate.Answer, 80))
			}
		case c.Status != "":
			if candidate.Status != c.Status {
				fail("status %s", candidate.Status)
			}
		case c.MaxSteps != 0:
			if candidate.Steps > c.MaxSteps {
				fail("%d steps", candidate.Steps)
			}
		default:
			if candidate.USD > c.MaxUSD {
				fail("%.4f USD", candidate.USD)
			}
		}
		out = append(out, r)
	}
	return out
}

// turnCall is a call of a run or of one of its sub-agents, with its turn
// ("2", or "2.1": the sub-agent's turn 1, started at turn 2).
type turnCall struct {
	replayreport.Call
	turn string
}

// everyCall is calls and, after each sub-agent call, the sub-agent's: a
// payout a sub-agent makes is a payout the run made.
func everyCall(prefix string, calls []replayreport.Call) []turnCall {
	var out []turnCall
	for _, c := range calls {
		turn := prefix + strconv.Itoa(c.Step)
		out = append(out, turnCall{Call: c, turn: turn})
		if c.Agent != nil {
			out = append(out, everyCall(turn+".", c.Agent.Calls)...)
		}
	}
	return out
}

// matching are the calls cc counts. A sub-agent's tools are its parent's,
// so the parent's spec holds their parameters.
func matching(e Entry, cc *CallCheck, calls []turnCall) ([]turnCall, error) {
	var rule *argrule.Rule
	if cc.When != "" {
		var spec struct {
			Tools []agentsagatype.ToolSpec `json:"tools"`
		}
		_ = json.Unmarshal(e.Spec, &spec)
		var parameters json.RawMessage
		for _, t := range spec.Tools {
			if t.Name == cc.Tool {
				parameters = t.Parameters
			}
		}
		var err error
		if rule, err = argrule.Condition(cc.When, parameters); err != nil {
			return nil, fmt.Errorf("when: %w", err)
		}
	}
	var hits []turnCall
	for _, c := range calls {
		if c.Tool != cc.Tool {
			continue
		}
		if rule != nil {
			if ok, err := rule.Holds(c.Arguments); err != nil || !ok {
				continue
			}
		}
		if cc.Approved != nil && *cc.Approved != strings.HasPrefix(c.Approval, agentsagatype.ApprovalApproved) {
			continue
		}
		hits = append(hits, c)
	}
	return hits, nil
}

func approvalNote(c replayreport.Call) string {
	if c.Approval != "" {
		return " (" + clip(c.Approval, 60) + ")"
	}
	return ""
}

// Passed says whether every result passed.
func Passed(results []Result) bool {
	for _, r := range results {
		if !r.Passed {
			return false
		}
	}
	return true
}
