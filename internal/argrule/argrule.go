// Package argrule owns the expressions a tool's spec states over a call's
// arguments: the condition under which a call waits for a human's
// approval, a per-call limit the arguments must meet, and the amount a
// per-run limit sums (agentsagatype.ApprovalSpec, agentsagatype.LimitSpec).
//
// The expressions are CEL (github.com/google/cel-go), the language
// Kubernetes admission policies and Envoy use for the same job: small,
// side-effect free, always terminating, and evaluated the same way on
// every replay, so workflow code may evaluate them. Each top-level
// property of the tool's parameter schema is a variable (amount > 100);
// `args` is the whole argument object (args.amount, has(args.note)).
//
// An expression is compiled against the tool's schema when the spec is
// validated, so one that does not parse, names a property the tool does
// not have, or gives the wrong type is refused before the run starts.
package argrule

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
)

// Rule is one compiled expression.
type Rule struct {
	source string
	vars   []string
	prg    cel.Program
}

// String is the expression as the spec wrote it.
func (r *Rule) String() string { return r.source }

// Condition compiles a yes-or-no expression (amount > 100) against the
// tool's parameter schema.
func Condition(expr string, parameters json.RawMessage) (*Rule, error) {
	return compile(expr, parameters, types.BoolType)
}

// Amount compiles an expression whose value is a number (amount, or
// args.cents / 100.0), summed by a per-run limit.
func Amount(expr string, parameters json.RawMessage) (*Rule, error) {
	return compile(expr, parameters, types.DoubleType, types.IntType, types.UintType)
}

// costLimit bounds one evaluation. The expressions are meant to be one
// comparison or one sum; a comprehension over a huge argument list is cut
// off rather than stalling a workflow task.
const costLimit = 100_000

func compile(expr string, parameters json.RawMessage, want ...*types.Type) (*Rule, error) {
	if strings.TrimSpace(expr) == "" {
		return nil, errors.New("the expression is empty")
	}
	vars, err := properties(parameters)
	if err != nil {
		return nil, err
	}
	opts := []cel.EnvOption{cel.Variable("args", cel.MapType(cel.StringType, cel.DynType)), cel.CrossTypeNumericComparisons(true)}
	for _, v := range vars {
		opts = append(opts, cel.Variable(v, cel.DynType))
	}
	env, err := cel.NewEnv(opts...)
	if err != nil {
		return nil, fmt.Errorf("the expression environment: %w", err)
	}
	ast, issues := env.Compile(expr)
	if issues != nil && issues.Err() != nil {
		return nil, fmt.Errorf("%q does not compile: %s", expr, oneLine(issues.Err().Error()))
	}
	if out := ast.OutputType(); out != types.DynType && !slices.ContainsFunc(want, out.IsExactType) {
		return nil, fmt.Errorf("%q gives a %s; it must give a %s", expr, out, typeNames(want))
	}
	prg, err := env.Program(ast, cel.CostLimit(costLimit))
	if err != nil {
		return nil, fmt.Errorf("%q: %w", expr, err)
	}
	return &Rule{source: expr, vars: vars, prg: prg}, nil
}

// Holds evaluates a condition on a call's JSON arguments. An argument the
// expression needs and the call left out is an error, not false: the
// caller decides which way an unknown falls (approval asks a human; a
// limit refuses).
func (r *Rule) Holds(arguments string) (bool, error) {
	v, err := r.eval(arguments)
	if err != nil {
		return false, err
	}
	b, ok := v.Value().(bool)
	if !ok {
		return false, fmt.Errorf("%q gave %v, not true or false", r.source, v.Value())
	}
	return b, nil
}

// Number evaluates an amount on a call's JSON arguments.
func (r *Rule) Number(arguments string) (float64, error) {
	v, err := r.eval(arguments)
	if err != nil {
		return 0, err
	}
	var n float64
	switch x := v.Value().(type) {
	case float64:
		n = x
	case int64:
		n = float64(x)
	case uint64:
		n = float64(x)
	default:
		return 0, fmt.Errorf("%q gave %v, not a number", r.source, v.Value())
	}
	if math.IsNaN(n) || math.IsInf(n, 0) {
		return 0, fmt.Errorf("%q gave %v, not a finite number", r.source, n)
	}
	return n, nil
}

func (r *Rule) eval(arguments string) (ref interface{ Value() any }, err error) {
	var args map[string]any
	if err := json.Unmarshal([]byte(arguments), &args); err != nil {
		return nil, fmt.Errorf("the arguments are not a JSON object: %w", err)
	}
	if args == nil {
		args = map[string]any{}
	}
	activation := map[string]any{"args": args}
	for _, v := range r.vars {
		if value, ok := args[v]; ok {
			activation[v] = value
		}
	}
	out, _, err := r.prg.Eval(activation)
	if err != nil {
		return nil, fmt.Errorf("%q: %s", r.source, oneLine(err.Error()))
	}
	return out, nil
}

// properties lists the top-level properties of a JSON schema that can be
// CEL variables: identifiers that are not CEL's reserved words or `args`.
// Others stay reachable as args["name"].
func properties(schema json.RawMessage) ([]string, error) {
	if len(schema) == 0 {
		return nil, nil
	}
	var s struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(schema, &s); err != nil {
		return nil, fmt.Errorf("the tool's parameters are not a JSON schema object: %w", err)
	}
	var vars []string
	for name := range s.Properties {
		if identifier(name) && !reserved[name] && name != "args" {
			vars = append(vars, name)
		}
	}
	slices.Sort(vars)
	return vars, nil
}

func identifier(s string) bool {
	for i, c := range s {
		letter := c == '_' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z')
		if !letter && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return s != ""
}

// reserved are CEL's reserved words and literals, which cannot name a
// variable.
var reserved = map[string]bool{
	"true": true, "false": true, "null": true, "in": true, "as": true, "break": true, "const": true,
	"continue": true, "else": true, "for": true, "function": true, "if": true, "import": true, "let": true,
	"loop": true, "package": true, "namespace": true, "return": true, "var": true, "void": true, "while": true,
}

func typeNames(ts []*types.Type) string {
	names := make([]string, len(ts))
	for i, t := range ts {
		names[i] = t.String()
	}
	return strings.Join(names, " or ")
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
