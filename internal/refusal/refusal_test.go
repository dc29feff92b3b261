package refusal_test

import (
	"encoding/json"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/internal/refusal"
)

func TestRefusalRulesCompileErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		rules   refusal.Rules
		wantErr string
	}{
		"bad pattern": {
			refusal.Rules{{Pattern: "ok"}, {Pattern: "("}},
			`refusal[1]: pattern "(" does not compile: error parsing regexp`,
		},
		"bad field pattern": {
			refusal.Rules{{Field: "error.message", Pattern: "[a-"}},
			`refusal[0]: pattern "[a-" does not compile`,
		},
		"neither equals nor pattern": {
			refusal.Rules{{Field: "status"}},
			"refusal[0]: needs equals or pattern",
		},
		"empty rule": {
			refusal.Rules{{Field: "status", Equals: "declined"}, {}},
			"refusal[1]: needs equals or pattern",
		},
		"equals without field": {
			refusal.Rules{{Equals: "declined"}},
			`refusal[0]: equals "declined" needs a field`,
		},
		"empty path segment": {
			refusal.Rules{{Field: "error..code", Equals: "x"}},
			`refusal[0]: field "error..code" has an empty path segment`,
		},
		"trailing dot": {
			refusal.Rules{{Field: "error.", Equals: "x"}},
			`refusal[0]: field "error." has an empty path segment`,
		},
	} {
		t.Run(name, func(t *testing.T) {
			m, err := tc.rules.Compile()
			assert.Nil(t, m)
			assert.ErrorContains(t, err, tc.wantErr)
		})
	}
}

func TestRefusalMatch(t *testing.T) {
	rules := refusal.Rules{
		{Field: "status", Equals: "declined"},
		{Field: "error.code", Equals: "402"},
		{Field: "ok", Equals: "false"},
		{Field: "errors.0.reason", Pattern: "(?i)^card"},
		{Field: "detail", Equals: "blocked", Pattern: "^bl"},
		{Field: "result", Equals: "null"},
		{Field: "limits", Equals: `{"a":1,"b":"<x>"}`},
		{Field: "ratio", Equals: "0.5"},
		{Field: "big", Equals: "12345678901234567890"},
		{Pattern: "insufficient funds"},
	}
	m, err := rules.Compile()
	require.NoError(t, err)

	for name, tc := range map[string]struct {
		body   string
		reason string // "" means not refused
	}{
		"status declined":              {`{"status": "declined"}`, `field status = "declined"`},
		"status approved":              {`{"status": "approved"}`, ""},
		"integer code":                 {`{"error": {"code": 402}}`, `field error.code = "402"`},
		"float code without .0":        {`{"error": {"code": 402.0}}`, `field error.code = "402"`},
		"exponent code":                {`{"error": {"code": 4.02e2}}`, `field error.code = "402"`},
		"string code":                  {`{"error": {"code": "402"}}`, `field error.code = "402"`},
		"other code":                   {`{"error": {"code": 500}}`, ""},
		"path through a non-object":    {`{"error": "402"}`, ""},
		"bool false":                   {`{"ok": false}`, `field ok = "false"`},
		"bool true":                    {`{"ok": true}`, ""},
		"array index":                  {`{"errors": [{"reason": "Card expired"}]}`, `field errors.0.reason = "Card expired" matches "(?i)^card"`},
		"array index out of range":     {`{"errors": []}`, ""},
		"equals and pattern":           {`{"detail": "blocked"}`, `field detail = "blocked" and matches "^bl"`},
		"null":                         {`{"result": null}`, `field result = "null"`},
		"missing is not null":          {`{"other": 1}`, ""},
		"object as compact JSON":       {`{"limits": {"b": "<x>", "a": 1}}`, `field limits = "{\"a\":1,\"b\":\"<x>\"}"`},
		"fraction":                     {`{"ratio": 0.50}`, `field ratio = "0.5"`},
		"big integer stays exact":      {`{"big": 12345678901234567890}`, `field big = "12345678901234567890"`},
		"big integer neighbour":        {`{"big": 12345678901234567891}`, ""},
		"body pattern on JSON":         {`{"message": "insufficient funds"}`, `body matches "insufficient funds"`},
		"body pattern on text":         {`Error: insufficient funds on card`, `body matches "insufficient funds"`},
		"first rule wins":              {`{"status": "declined", "note": "insufficient funds"}`, `field status = "declined"`},
		"not JSON skips field rules":   {`status: declined`, ""},
		"trailing garbage is not JSON": {`{"status": "declined"} trailing`, ""},
		"two documents are not JSON":   {`{"status": "declined"} {}`, ""},
		"empty body":                   {``, ""},
		"top-level array":              {`[{"status": "declined"}]`, ""},
	} {
		t.Run(name, func(t *testing.T) {
			reason, refused := m.Match(tc.body)
			assert.Equal(t, tc.reason, reason)
			assert.Equal(t, tc.reason != "", refused)
		})
	}
}

func TestRefusalMatchTopLevelArrayPath(t *testing.T) {
	m, err := refusal.Rules{{Field: "1.status", Equals: "declined"}}.Compile()
	require.NoError(t, err)
	reason, refused := m.Match(`[{"status": "ok"}, {"status": "declined"}]`)
	assert.True(t, refused)
	assert.Equal(t, `field 1.status = "declined"`, reason)
}

func TestNilAndEmptyMatchersNeverRefuse(t *testing.T) {
	var m *refusal.Matcher
	reason, refused := m.Match(`{"status": "declined"}`)
	assert.False(t, refused)
	assert.Empty(t, reason)

	empty, err := refusal.Rules(nil).Compile()
	require.NoError(t, err)
	_, refused = empty.Match("anything")
	assert.False(t, refused)
}

func TestRefusalRulesFromJSON(t *testing.T) {
	var rules refusal.Rules
	require.NoError(t, json.Unmarshal([]byte(`[{"field": "error.code", "equals": "card_declined"}, {"pattern": "(?i)out of stock"}]`), &rules))
	assert.Equal(t, refusal.Rules{{Field: "error.code", Equals: "card_declined"}, {Pattern: "(?i)out of stock"}}, rules)
	m, err := rules.Compile()
	require.NoError(t, err)
	reason, refused := m.Match("Sorry, OUT OF STOCK")
	assert.True(t, refused)
	assert.Equal(t, `body matches "(?i)out of stock"`, reason)
}

func TestRefusalMatcherConcurrentUse(t *testing.T) {
	m, err := refusal.Rules{{Field: "status", Equals: "declined"}, {Pattern: "nope"}}.Compile()
	require.NoError(t, err)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 100 {
				_, refused := m.Match(`{"status": "declined"}`)
				assert.True(t, refused)
			}
		})
	}
	wg.Wait()
}
