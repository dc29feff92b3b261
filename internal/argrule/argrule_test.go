package argrule_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/agentsaga/agentsaga/internal/argrule"
)

var refundSchema = json.RawMessage(`{"type":"object","properties":{"order":{"type":"string"},"amount":{"type":"number"},"in":{"type":"string"},"note-text":{"type":"string"}}}`)

func TestConditionOnTheArguments(t *testing.T) {
	rule, err := argrule.Condition("amount > 100", refundSchema)
	if err != nil {
		t.Fatal(err)
	}
	for args, want := range map[string]bool{
		`{"order":"A1","amount":250}`:   true,
		`{"order":"A1","amount":100}`:   false,
		`{"order":"A1","amount":100.5}`: true,
		`{"order":"A1","amount":3}`:     false,
	} {
		got, err := rule.Holds(args)
		if err != nil || got != want {
			t.Errorf("Holds(%s) = %v, %v; want %v", args, got, err, want)
		}
	}
}

func TestArgsReachesEveryProperty(t *testing.T) {
	// A property that cannot be a CEL variable (a reserved word, a dash)
	// is still reachable through args.
	rule, err := argrule.Condition(`args["note-text"].contains("urgent") || "in" in args`, refundSchema)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := rule.Holds(`{"note-text":"urgent please"}`); err != nil || !got {
		t.Fatalf("Holds = %v, %v; want true", got, err)
	}
	if got, err := rule.Holds(`{"note-text":"later"}`); err != nil || got {
		t.Fatalf("Holds = %v, %v; want false", got, err)
	}
}

func TestAmountSumsNumbers(t *testing.T) {
	rule, err := argrule.Amount("amount", refundSchema)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := rule.Number(`{"amount":12.5}`); err != nil || n != 12.5 {
		t.Fatalf("Number = %v, %v; want 12.5", n, err)
	}
	cents, err := argrule.Amount("int(args.cents) / 100", nil)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := cents.Number(`{"cents":250}`); err != nil || n != 2 {
		t.Fatalf("Number = %v, %v; want 2 (integer division)", n, err)
	}
}

// A call that leaves out an argument the rule needs, or gives it the
// wrong type, is an error the caller sees, never a silent false.
func TestMissingOrWrongArgumentIsAnError(t *testing.T) {
	rule, err := argrule.Condition("amount <= 100", refundSchema)
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range []string{`{"order":"A1"}`, `{"amount":"lots"}`, `[1,2]`, `not json`} {
		if _, err := rule.Holds(args); err == nil {
			t.Errorf("Holds(%s): no error", args)
		} else if !strings.Contains(err.Error(), "amount <= 100") && !strings.Contains(err.Error(), "JSON") {
			t.Errorf("Holds(%s): %v does not name the expression", args, err)
		}
	}
	amount, _ := argrule.Amount("amount", refundSchema)
	if _, err := amount.Number(`{"amount":"12"}`); err == nil {
		t.Error("Number of a string: no error")
	}
}

// Bad expressions are refused at compile time with a message that names
// what is wrong.
func TestBadExpressionsAreRefused(t *testing.T) {
	for expr, want := range map[string]string{
		"":                "empty",
		"amount >":        "does not compile",
		"amout > 100":     "does not compile", // a property the tool does not have
		`"yes"`:           "must give a bool",
		"amount + 1 > ":   "does not compile",
		"order == 1 && (": "does not compile",
	} {
		_, err := argrule.Condition(expr, refundSchema)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Condition(%q) = %v; want an error containing %q", expr, err, want)
		}
	}
	if _, err := argrule.Amount("amount > 1", refundSchema); err == nil || !strings.Contains(err.Error(), "must give a double or int or uint") {
		t.Errorf("Amount of a condition = %v", err)
	}
	if _, err := argrule.Condition("true", json.RawMessage(`[`)); err == nil || !strings.Contains(err.Error(), "JSON schema") {
		t.Errorf("Condition with a broken schema = %v", err)
	}
}

func ExampleCondition() {
	schema := json.RawMessage(`{"type":"object","properties":{"amount":{"type":"number"}}}`)
	rule, _ := argrule.Condition("amount > 100", schema)
	big, _ := rule.Holds(`{"amount": 250}`)
	small, _ := rule.Holds(`{"amount": 20}`)
	fmt.Println(big, small)
	// Output: true false
}
