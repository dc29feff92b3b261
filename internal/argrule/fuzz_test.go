package argrule_test

import (
	"encoding/json"
	"testing"

	"github.com/agentsaga/agentsaga/internal/argrule"
)

// Whatever arguments a model sends, evaluating a rule returns an answer or
// an error, never a panic, and the same answer twice (workflow code
// evaluates it, and replay must agree).
func FuzzEvaluate(f *testing.F) {
	schema := json.RawMessage(`{"type":"object","properties":{"amount":{"type":"number"},"items":{"type":"array"}}}`)
	condition, err := argrule.Condition(`amount > 100 || size(items) > 3 || "x" in args`, schema)
	if err != nil {
		f.Fatal(err)
	}
	amount, err := argrule.Amount("amount * 2", schema)
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []string{`{"amount":250}`, `{"amount":"250"}`, `{"items":[1,2,3,4]}`, `{}`, `null`, `[]`, `{"amount":1e308}`, `{"x":{}}`, `not json`} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, args string) {
		held, err := condition.Holds(args)
		again, errAgain := condition.Holds(args)
		if held != again || (err == nil) != (errAgain == nil) {
			t.Fatalf("Holds(%q) gave %v, %v then %v, %v", args, held, err, again, errAgain)
		}
		n, err := amount.Number(args)
		m, errAgain := amount.Number(args)
		if n != m || (err == nil) != (errAgain == nil) {
			t.Fatalf("Number(%q) gave %v, %v then %v, %v", args, n, err, m, errAgain)
		}
	})
}
