package compensation_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/internal/compensation"
)

func Example_resolve() {
	args, err := compensation.Resolve(
		`{"charge_id": "{{result.id}}", "amount": "{{args.amount}}", "reason": "saga rollback", "key": "{{key}}"}`,
		`{"customer": "ann", "amount": 10}`, // what the forward call sent
		`{"id": "ch_1", "status": "paid"}`,  // what it got back
		"run-42/step-001-call-1-charge")
	fmt.Println(args, err)
	// Output: {"amount":10,"charge_id":"ch_1","key":"run-42/step-001-call-1-charge","reason":"saga rollback"} <nil>
}

func TestResolve(t *testing.T) {
	for name, tc := range map[string]struct{ template, args, result, want string }{
		"nested paths and arrays": {`{"id": "{{result.charges.1.id}}", "who": ["{{args.customer.name}}"]}`,
			`{"customer": {"name": "bob"}}`, `{"charges": [{"id": "a"}, {"id": "b"}]}`, `{"id":"b","who":["bob"]}`},
		"no result (a timeout) gives null": {`{"charge_id": "{{result.id}}", "key": "{{key}}"}`, `{}`, ``,
			`{"charge_id":null,"key":"k"}`},
		"plain-text result is usable whole": {`{"note": "{{result}}"}`, `{}`, `done`, `{"note":"done"}`},
		"only whole-string placeholders":    {`{"text": "refund {{args.x}}"}`, `{"x": 1}`, `{}`, `{"text":"refund {{args.x}}"}`},
		"empty template":                    {``, `{}`, `{}`, `{}`},
		"spaces inside braces":              {`{"x": "{{ args.x }}"}`, `{"x": true}`, `{}`, `{"x":true}`},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := compensation.Resolve(tc.template, tc.args, tc.result, "k")
			require.NoError(t, err)
			assert.JSONEq(t, tc.want, got)
		})
	}
	_, err := compensation.Resolve(`{not json`, `{}`, `{}`, "k")
	assert.ErrorContains(t, err, "arguments template is not JSON")
}
