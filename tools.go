package agentsaga

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"go.temporal.io/sdk/activity"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/keyed"
	"github.com/agentsaga/agentsaga/internal/toolcheck"
)

// Tool is a Go function a run may call, with the ToolSpec the model is
// offered. Make one with NewTool; an Engine registers it beside the
// built-in tools, and a RunSpec offers it by listing Spec().
type Tool struct {
	spec agentsagatype.ToolSpec
	fn   activities.ToolFunc
}

// Spec is the tool's declaration, for RunSpec.Tools.
func (t Tool) Spec() ToolSpec { return t.spec }

// ToolOption shapes a Tool.
type ToolOption func(*agentsagatype.ToolSpec) error

// NewTool makes a typed Go tool. The JSON schema of its arguments is
// derived from Args (its json tags name the fields; a field without
// omitempty is required; a `jsonschema:"..."` tag describes it), the
// model's arguments are decoded into Args before fn runs, and fn's Result
// is encoded as the tool's JSON output. The call's idempotency key is in
// ctx (CallKey): a tool with an outside effect passes it on.
//
// An error fn returns is retried, paid for from the retry budget, unless
// it is Permanent: arguments that cannot be decoded are never retried.
func NewTool[Args, Result any](name, description string, fn func(context.Context, Args) (Result, error), opts ...ToolOption) (Tool, error) {
	schema, err := jsonschema.For[Args](nil)
	if err != nil {
		return Tool{}, fmt.Errorf("agentsaga: tool %s: derive the schema of %T: %w", name, *new(Args), err)
	}
	parameters, err := json.Marshal(schema)
	if err != nil {
		return Tool{}, fmt.Errorf("agentsaga: tool %s: encode its schema: %w", name, err)
	}
	spec := agentsagatype.ToolSpec{Name: name, Description: description, Kind: agentsagatype.ToolKindGo, Parameters: parameters}
	for _, opt := range opts {
		if err := opt(&spec); err != nil {
			return Tool{}, fmt.Errorf("agentsaga: tool %s: %w", name, err)
		}
	}
	if err := toolcheck.Validate(spec); err != nil {
		return Tool{}, fmt.Errorf("agentsaga: %w", err)
	}
	call := func(ctx context.Context, in activities.ToolInvocation) (string, error) {
		var args Args
		if err := json.Unmarshal(in.Arguments, &args); err != nil {
			return "", activities.Permanent(fmt.Errorf("tool %s: the arguments do not decode into %T: %w", name, args, err))
		}
		result, err := fn(ctx, args)
		if err != nil {
			return "", err
		}
		out, err := json.Marshal(result)
		if err != nil {
			return "", activities.Permanent(fmt.Errorf("tool %s: encode its result %T: %w", name, result, err))
		}
		return string(out), nil
	}
	return Tool{spec: spec, fn: call}, nil
}

// CallKey is the idempotency key of the tool call or model call ctx
// belongs to (a Tool's function, a Model's Turn): the same on every
// attempt of the call, so a downstream service that deduplicates by it
// applies the effect once. In another activity it is that activity's
// workflow ID + "/" + activity ID; outside an activity, "".
func CallKey(ctx context.Context) string {
	if !activity.IsActivity(ctx) {
		return ""
	}
	return keyed.CallKey(ctx)
}

// Permanent marks an error as not worth retrying (bad arguments, a
// refusal by rule).
func Permanent(err error) error { return activities.Permanent(err) }

// WithTimeout bounds one attempt of the tool (the default is 30 s).
func WithTimeout(d time.Duration) ToolOption {
	return func(s *agentsagatype.ToolSpec) error {
		if d <= 0 {
			return fmt.Errorf("timeout %s is not positive", d)
		}
		s.TimeoutSeconds = d.Seconds()
		return nil
	}
}

// WithCompensation names the tool that undoes this one, with its
// arguments as a template ({{args.x}}, {{result.x}}, {{key}}): a failed
// run calls it, backwards, under the key <forward key>/compensate.
func WithCompensation(tool string, arguments map[string]string) ToolOption {
	return func(s *agentsagatype.ToolSpec) error {
		raw, err := json.Marshal(arguments)
		if err != nil {
			return fmt.Errorf("compensation arguments: %w", err)
		}
		s.Compensate = &agentsagatype.CompensationSpec{Tool: tool, Arguments: raw}
		return nil
	}
}

// Irreversible marks a tool whose effect cannot be undone: a rollback past
// it ends needs-attention, naming it, and each call waits for a human's
// approval unless WithApproval says "never".
func Irreversible() ToolOption {
	return func(s *agentsagatype.ToolSpec) error {
		s.Irreversible = true
		return nil
	}
}

// ReadOnly declares that the tool only reads (spec: read_only): the
// no-progress watchdog counts its call as progress only when its result is
// new, while a successful call with new arguments of a tool that changes
// the world is progress whatever it answers.
func ReadOnly() ToolOption {
	return func(s *agentsagatype.ToolSpec) error {
		s.ReadOnly = true
		return nil
	}
}

// WithApproval makes calls wait for a human's yes before they are sent:
// always, never (an irreversible tool's default switched off), or when a
// CEL condition on the arguments holds (amount > 100). A run waits on a
// durable Update (Run.Approve, Run.Deny; agentsaga approve / deny), and the
// ledger keeps who decided. NewTool refuses a condition that does not
// compile against the tool's arguments.
func WithApproval(rule agentsagatype.ApprovalSpec) ToolOption {
	return func(s *agentsagatype.ToolSpec) error {
		s.Approval = &rule
		return nil
	}
}

// WithLimits bounds the arguments: a CEL condition each call must meet
// ({Call: "amount <= 100"}), or an amount summed over the run's calls,
// compensated ones subtracted ({RunSum: "amount", AtMost: 200}). A call
// over a limit is refused before it is sent, whatever the model was told.
func WithLimits(limits ...agentsagatype.LimitSpec) ToolOption {
	return func(s *agentsagatype.ToolSpec) error {
		s.Limits = append(s.Limits, limits...)
		return nil
	}
}

// WithRefusal declares the answers that mean "no" although the call
// succeeded (a field equal to a value, say): a refusal is never retried and
// brings in a human.
func WithRefusal(rules ...agentsagatype.RefusalRule) ToolOption {
	return func(s *agentsagatype.ToolSpec) error {
		s.Refusal = append(s.Refusal, rules...)
		return nil
	}
}
