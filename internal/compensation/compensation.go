package compensation

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/jsonpath"
	"github.com/agentsaga/agentsaga/internal/wire"
	"go.temporal.io/sdk/workflow"
)

// ForwardActivityID is the forward action's activity ID as seen from the
// workflow walking it: its own activity ID for one of its own actions, and
// the path below it for a sub-agent's (whose workflow ID extends its
// parent's), so the compensation's key is the forward key + /compensate
// whichever workflow runs it, and a parent and a child walking the same
// action share one compensation.
func ForwardActivityID(walkerWorkflowID string, c agentsagatype.Compensation) string {
	if below, ok := strings.CutPrefix(c.ForwardKey, walkerWorkflowID+"/"); ok {
		return below
	}
	return c.ForwardActivityID
}

var placeholder = regexp.MustCompile(`^\{\{\s*(key|args|result)((?:\.[^.\s}]+)*)\s*\}\}$`)

// resolve fills a compensation's argument template from its forward call.
// A string value that is exactly {{args.a.b}}, {{result.a.b}} or {{key}}
// becomes that value, keeping its JSON type; anything else is literal. A
// result field that does not exist (the forward call timed out, so there
// is no result) becomes null: a compensation must then find what to undo
// by {{key}}, or answer that there is nothing to undo.
func resolve(template, forwardArgs, forwardResult, forwardKey string) (string, error) {
	if strings.TrimSpace(template) == "" {
		template = "{}"
	}
	tmpl, err := decode(template)
	if err != nil {
		return "", fmt.Errorf("compensation: arguments template is not JSON: %w", err)
	}
	args, _ := decode(forwardArgs)
	result, err := decode(forwardResult)
	if err != nil && forwardResult != "" {
		result = forwardResult // a plain-text result is still usable whole
	}
	out, err := json.Marshal(fill(tmpl, args, result, forwardKey))
	if err != nil {
		return "", fmt.Errorf("compensation: arguments: %w", err)
	}
	return string(out), nil
}

// decode reads s as exactly one JSON value, numbers kept as written: as
// float64, an ID or amount past 2^53 would become its neighbour and the
// compensation would undo the wrong thing.
func decode(s string) (any, error) {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("more than one JSON value")
	}
	return v, nil
}

func fill(v, args, result any, key string) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, item := range v {
			out[k] = fill(item, args, result, key)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, item := range v {
			out[i] = fill(item, args, result, key)
		}
		return out
	case string:
		m := placeholder.FindStringSubmatch(v)
		if m == nil {
			return v
		}
		source := map[string]any{"key": key, "args": args, "result": result}[m[1]]
		// An empty step ("args..x") is skipped, and a missing value is null.
		value, _ := jsonpath.Lookup(source, slices.DeleteFunc(strings.Split(m[2], "."), func(step string) bool { return step == "" }))
		return value
	}
	return v
}

// Runner runs compensations for Walk: the workflow provides it, as
// activities.
type Runner interface {
	// Fence closes the run for its rollback: no forward action of the run
	// or its sub-agents may be claimed any more, and every attempt that
	// still held one has settled. It returns the plan read after that.
	Fence(ctx workflow.Context) (wire.RollbackPlan, error)
	// Run executes the compensating action and reports
	// agentsagatype.CompensationDone or CompensationNotNeeded
	// (the far side had nothing to undo), or the error it still failed with
	// after its own bounded retries. retry counts the human retries before
	// this run (0 the first time); each has its own key (activityid.Compensation).
	Run(ctx workflow.Context, c agentsagatype.Compensation, arguments string, retry int) (string, error)
	// Settle records a compensation's status in the ledger.
	Settle(ctx workflow.Context, c agentsagatype.Compensation, status, cause, reason string) error
	// Escalate hands a compensation that still fails to a human and waits
	// for the decision.
	Escalate(ctx workflow.Context, c agentsagatype.Compensation, err error) Decision
}

// Decisions a human can take about a failed compensation, by the names of
// the run's Updates (workflows.UpdateRetry and UpdateSkip); any other
// action, "abort" (workflows.UpdateAbort) or none, stops the walk.
const (
	decisionRetry = "retry"
	decisionSkip  = "skip"
)

// Decision is what a human decided about a failed compensation: Action is
// "retry", "skip" or "abort".
type Decision struct {
	Action string `json:"action"`
	Reason string `json:"reason,omitempty"`
}

// Report says what a walk did.
type Report struct {
	// Stack counts the compensations the walk found.
	Stack       int      `json:"stack"`
	Compensated int      `json:"compensated"`
	NotNeeded   int      `json:"not_needed"`
	Skipped     []string `json:"skipped,omitempty"` // forward keys, with the human's reason
	// Irreversible lists the actions that happened (or may have) and
	// cannot be undone: the run needs a human to say so.
	Irreversible []string `json:"irreversible,omitempty"`
	// Aborted is set when a human stopped the walk; Pending lists what was
	// left uncompensated.
	Aborted bool     `json:"aborted,omitempty"`
	Pending []string `json:"pending,omitempty"`
}

// Walk undoes a run's actions, and its sub-agents', in reverse order. It
// runs on a disconnected context, so a cancelled run still compensates.
// First it fences: no forward action of the run may be claimed from then
// on, and an attempt still at work on one is waited for, so what is
// compensated is what happened (an outcome still unknown is compensated by
// key, and the far side answers "nothing to undo" if nothing was done). A
// compensation already settled (by an earlier walk, before a worker was
// lost) is not run again, and every compensation is idempotent by its own
// key, so a walk that is replayed or resumed does each exactly once.
func Walk(ctx workflow.Context, runner Runner) (Report, error) {
	ctx, _ = workflow.NewDisconnectedContext(ctx)
	var report Report
	plan, err := runner.Fence(ctx)
	if err != nil {
		return report, err
	}
	stack := plan.Stack
	report.Stack = len(stack)
	for _, a := range plan.Irreversible {
		what := "happened"
		if a.Status != agentsagatype.ActionCompleted {
			what = "may have happened (outcome unknown)"
		}
		report.Irreversible = append(report.Irreversible, fmt.Sprintf("%s (%s, irreversible, %s)", a.Key, a.Tool, what))
	}
	for i, c := range stack {
		switch c.Status {
		case agentsagatype.CompensationDone:
			report.Compensated++
			continue
		case agentsagatype.CompensationNotNeeded:
			report.NotNeeded++
			continue
		case agentsagatype.CompensationSkipped:
			report.Skipped = append(report.Skipped, c.ForwardKey+": "+c.Reason)
			continue
		}
		if c.Forward.Status == agentsagatype.ActionRejected {
			// The far side said no: nothing took effect.
			if err := runner.Settle(ctx, c, agentsagatype.CompensationNotNeeded, "", "the forward action was rejected"); err != nil {
				return report, err
			}
			report.NotNeeded++
			continue
		}
		arguments, err := resolve(c.ArgumentsTemplate, c.Forward.Arguments, c.Forward.Result, c.ForwardKey)
		if err != nil {
			return report, err
		}
		for retry := 0; ; retry++ {
			status, runErr := runner.Run(ctx, c, arguments, retry)
			if runErr == nil {
				if err := runner.Settle(ctx, c, status, "", ""); err != nil {
					return report, err
				}
				if status == agentsagatype.CompensationNotNeeded {
					report.NotNeeded++
				} else {
					report.Compensated++
				}
				break
			}
			if err := runner.Settle(ctx, c, agentsagatype.CompensationFailed, runErr.Error(), ""); err != nil {
				return report, err
			}
			decision := runner.Escalate(ctx, c, runErr)
			switch decision.Action {
			case decisionRetry:
				continue
			case decisionSkip:
				if err := runner.Settle(ctx, c, agentsagatype.CompensationSkipped, runErr.Error(), decision.Reason); err != nil {
					return report, err
				}
				report.Skipped = append(report.Skipped, c.ForwardKey+": "+decision.Reason)
			default:
				report.Aborted = true
				for _, left := range stack[i:] {
					report.Pending = append(report.Pending, left.ForwardKey)
				}
				return report, nil
			}
			break
		}
	}
	return report, nil
}
