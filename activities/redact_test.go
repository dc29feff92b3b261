package activities

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestRedactorReplacesEveryFormOfEverySecret(t *testing.T) {
	t.Parallel()
	r := newRedactor([]string{"tok/en\"1234567890", "abc", "abcdefghijkl", "", "abc"})
	for in, want := range map[string]string{
		"plain tok/en\"1234567890 end":         "plain [redacted] end",
		`json "tok/en\"1234567890"`:            `json "[redacted]"`,
		`escaped slash "tok\/en\"1234567890"`:  `escaped slash "[redacted]"`,
		"the longer wins: abcdefghijkl, abc":   "the longer wins: [redacted], [redacted]",
		"nothing secret here":                  "nothing secret here",
		"tok/en\"1234567890tok/en\"1234567890": "[redacted][redacted]",
	} {
		assert.Equal(t, want, r.redact(in), in)
	}
	// Cut at a limit, a secret's beginning at the end is removed too.
	assert.Equal(t, "answer: [redacted] and then ", r.redactCut("answer: abc and then abcdefgh"))
	assert.Equal(t, "cut inside ", r.redactCut("cut inside tok/en\"12"))
	// A secret cut short whose own head is the end of a whole one before it.
	assert.Equal(t, "x ", r.redactCut("x abcdefghijab"))
	assert.Equal(t, len(`tok\/en\"1234567890`), r.longest(), "the longest form is the escaped one")

	var none *redactor
	assert.Nil(t, newRedactor([]string{"", ""}))
	assert.Equal(t, "as is", none.redact("as is"))
	assert.Equal(t, "as is", none.redactCut("as is"))
	assert.Zero(t, none.longest())
	assert.NoError(t, none.wrap(nil))
}
