package compensation_test

import (
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/agentsaga/agentsaga/internal/compensation"
)

// FuzzResolve fills arbitrary templates from arbitrary forward calls. A
// template that is not JSON is an error that says so; anything else gives
// the same JSON every time, and a whole-value placeholder is replaced by
// exactly what the forward call sent, got back or was keyed by: a refund
// must undo the charge it names, not a neighbouring ID.
func FuzzResolve(f *testing.F) {
	for _, seed := range []struct{ template, args, result, key string }{
		{`{"charge_id": "{{result.id}}", "amount": "{{args.amount}}", "reason": "saga rollback", "key": "{{key}}"}`,
			`{"customer": "ann", "amount": 10}`, `{"id": "ch_1", "status": "paid"}`, "run-42/step-001-call-1-charge"},
		{`{"id": "{{result.charges.1.id}}", "who": ["{{args.customer.name}}"]}`,
			`{"customer": {"name": "bob"}}`, `{"charges": [{"id": "a"}, {"id": "b"}]}`, "k"},
		{`{"charge_id": "{{result.id}}", "key": "{{key}}"}`, `{}`, ``, "k"},
		{`{"note": "{{result}}"}`, `{}`, `done`, "k"},
		{`{"text": "refund {{args.x}}"}`, `{"x": 1}`, `{}`, "k"},
		{``, `{}`, `{}`, "k"},
		{`   `, ``, ``, ""},
		{`{"x": "{{ args.x }}"}`, `{"x": true}`, `{}`, "k"},
		{`{"x": "{{args.-1}}", "y": "{{args.0}}", "z": "{{args.a..b}}"}`, `[1, 2]`, `[]`, "k"},
		{`{"order": "{{args.order_id}}"}`, `{"order_id": 1.50}`, `{}`, "k"},
		{`{"n": "{{result.n}}"}`, `{}`, `{"n": 1e400}`, "k"},
		{`"{{key}}"`, `null`, `null`, "wf/step-001-call-1-x"},
		{`[1, 2.0, "{{args}}"]`, `{"a": [true, null]}`, `x`, "k"},
		{`{not json`, `{}`, `{}`, "k"},
		{`{} {}`, `{}`, `{}`, "k"},
		{`{"a": 1}`, `{"a": 1} trailing`, `{"b": 2} {"c": 3}`, "k"},
	} {
		f.Add(seed.template, seed.args, seed.result, seed.key)
	}
	f.Fuzz(func(t *testing.T, template, args, result, key string) {
		out, err := compensation.Resolve(template, args, result, key)
		if strings.TrimSpace(template) != "" && !json.Valid([]byte(template)) {
			if err == nil || !strings.Contains(err.Error(), "compensation: arguments template is not JSON") {
				t.Fatalf("template %q is not JSON but Resolve gave (%q, %v)", template, out, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("Resolve(%q, %q, %q, %q): %v", template, args, result, key, err)
		}
		if !json.Valid([]byte(out)) {
			t.Fatalf("Resolve(%q) = %q is not JSON", template, out)
		}
		if again, _ := compensation.Resolve(template, args, result, key); again != out {
			t.Fatalf("Resolve(%q) is not deterministic: %q then %q", template, out, again)
		}

		// Whole values round-trip exactly, numbers as they were written.
		whole, err := compensation.Resolve(`{"k": "{{key}}", "a": "{{args}}", "r": "{{result}}"}`, args, result, key)
		if err != nil {
			t.Fatalf("Resolve of whole-value placeholders: %v", err)
		}
		var got map[string]any
		if err := decodeExact(whole, &got); err != nil {
			t.Fatalf("Resolve gave %q: %v", whole, err)
		}
		if utf8.ValidString(key) && got["k"] != key {
			t.Fatalf("{{key}} became %#v, want %q", got["k"], key)
		}
		var wantArgs any
		if decodeExact(args, &wantArgs) != nil {
			wantArgs = nil // not JSON: nothing to copy, so null
		}
		if !reflect.DeepEqual(got["a"], wantArgs) {
			t.Fatalf("{{args}} of %q became %#v, want %#v", args, got["a"], wantArgs)
		}
		var wantResult any
		switch {
		case decodeExact(result, &wantResult) == nil:
		case result == "":
			wantResult = nil // no result (a timeout): null
		case utf8.ValidString(result):
			wantResult = result // a plain-text result is used whole
		default:
			return // encoding/json replaces invalid bytes: not comparable
		}
		if !reflect.DeepEqual(got["r"], wantResult) {
			t.Fatalf("{{result}} of %q became %#v, want %#v", result, got["r"], wantResult)
		}
	})
}

// decodeExact reads s as exactly one JSON value with numbers as written.
func decodeExact(s string, v any) error {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}
