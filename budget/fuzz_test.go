package budget_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/budget"
)

// FuzzClassifyStatus checks the retry classifier over every status code
// and x-should-retry hint: it is deterministic, it only ever answers
// retryable or non-retryable (a status code is never a refusal, which is a
// 200 whose body means "no"), a hint the server sent always wins, and
// without one the documented split holds: 408, 409, 425, 429 and 5xx
// retry, every other 4xx does not.
func FuzzClassifyStatus(f *testing.F) {
	// hint: 0 means no x-should-retry header, 1 "true", 2 "false".
	for _, status := range []int{0, -1, 100, 200, 204, 301, 304, 399, 400, 401, 403, 404, 408, 409, 410, 422, 425, 429, 499, 500, 502, 503, 504, 529, 599, 600, 999} {
		for hint := range uint8(3) {
			f.Add(status, hint)
		}
	}
	f.Fuzz(func(t *testing.T, status int, hint uint8) {
		var shouldRetry *bool
		switch hint % 3 {
		case 1:
			shouldRetry = new(true)
		case 2:
			shouldRetry = new(false)
		}
		class := budget.ClassifyStatus(status, shouldRetry)
		if again := budget.ClassifyStatus(status, shouldRetry); again != class {
			t.Fatalf("ClassifyStatus(%d, %v) is not deterministic: %v then %v", status, hint%3, class, again)
		}
		if class != budget.Retryable && class != budget.NonRetryable {
			t.Fatalf("ClassifyStatus(%d, %v) = %v; a status is retryable or not, never a refusal", status, hint%3, class)
		}
		if name := class.String(); name == "unknown" {
			t.Fatalf("ClassifyStatus(%d) returned a class with no name: %d", status, int(class))
		}
		if shouldRetry != nil {
			if want := map[bool]budget.Class{true: budget.Retryable, false: budget.NonRetryable}[*shouldRetry]; class != want {
				t.Fatalf("ClassifyStatus(%d, x-should-retry %v) = %v, want %v: the server's hint must win", status, *shouldRetry, class, want)
			}
			return
		}
		switch {
		case status >= 500, status == 408, status == 409, status == 425, status == 429:
			if class != budget.Retryable {
				t.Fatalf("ClassifyStatus(%d) = %v, want retryable", status, class)
			}
		case status >= 400:
			if class != budget.NonRetryable {
				t.Fatalf("ClassifyStatus(%d) = %v, want non-retryable: another attempt of a bad request only wastes budget", status, class)
			}
		}
	})
}

// FuzzRefusalRules compiles one arbitrary rule and matches it against an
// arbitrary body. A rule is rejected exactly when it is malformed, with an
// error naming its index; a compiled rule decides the same way every time,
// gives a reason exactly when it refuses, and decides a JSON body by its
// value, not by how it is spelled.
func FuzzRefusalRules(f *testing.F) {
	for _, seed := range []struct{ field, equals, pattern, body string }{
		{"status", "declined", "", `{"status": "declined"}`},
		{"status", "declined", "", `{"status": "approved"}`},
		{"error.code", "402", "", `{"error": {"code": 402}}`},
		{"error.code", "402", "", `{"error": {"code": 402.0}}`},
		{"error.code", "402", "", `{"error": {"code": 4.02e2}}`},
		{"error.code", "402", "", `{"error": {"code": "402"}}`},
		{"ok", "false", "", `{"ok": false}`},
		{"errors.0.reason", "", "(?i)^card", `{"errors": [{"reason": "Card expired"}]}`},
		{"errors.1.reason", "", "x", `{"errors": [{"reason": "x"}]}`},
		{"errors.-1.reason", "", "x", `{"errors": [{"reason": "x"}]}`},
		{"detail", "blocked", "^bl", `{"detail": "blocked"}`},
		{"result", "null", "", `{"result": null}`},
		{"limits", `{"a":1,"b":"<x>"}`, "", `{"limits": {"b": "<x>", "a": 1}}`},
		{"big", "12345678901234567890", "", `{"big": 12345678901234567890}`},
		{"big", "12345678901234567890", "", `{"big": 12345678901234567890.0}`},
		{"ratio", "0.5", "", `{"ratio": 0.50}`},
		{"huge", "1e+21", "", `{"huge": 1e21}`},
		{"", "", "insufficient funds", "Error: insufficient funds on card"},
		{"", "", "insufficient funds", `{"status": "declined"} trailing`},
		{"status", "declined", "", `{"status": "declined"} {"status": "ok"}`},
		{"status", "", "", `{}`},
		{"", "declined", "", `{}`},
		{"a..b", "x", "", `{}`},
		{"a.", "x", "", `{}`},
		{"", "", "(", `{}`},
		{"", "", "[a-", `{}`},
		{"a", "", `\p{Greek}+`, `{"a": "αβγ"}`},
		{"a", "\ufffd", "", "{\"a\": \"\xff\"}"},
	} {
		f.Add(seed.field, seed.equals, seed.pattern, seed.body)
	}
	f.Fuzz(func(t *testing.T, field, equals, pattern, body string) {
		rule := budget.RefusalRule{Field: field, Equals: equals, Pattern: pattern}
		m, err := budget.RefusalRules{rule}.Compile()

		_, reErr := regexp.Compile(pattern)
		malformed := (equals == "" && pattern == "") ||
			(equals != "" && field == "") ||
			(field != "" && slices.Contains(strings.Split(field, "."), "")) ||
			(pattern != "" && reErr != nil)
		if malformed != (err != nil) {
			t.Fatalf("Compile(%+v): malformed=%v but err=%v", rule, malformed, err)
		}
		if err != nil {
			if m != nil {
				t.Fatalf("Compile(%+v) returned both a matcher and an error", rule)
			}
			if !strings.HasPrefix(err.Error(), "refusal[0]: ") {
				t.Fatalf("Compile(%+v) error %q does not name the rule", rule, err)
			}
			return
		}

		reason, refused := m.Match(body)
		if r2, ok2 := m.Match(body); r2 != reason || ok2 != refused {
			t.Fatalf("Match(%q) is not stable: (%q, %v) then (%q, %v)", body, reason, refused, r2, ok2)
		}
		m2, _ := budget.RefusalRules{rule}.Compile()
		if r2, ok2 := m2.Match(body); r2 != reason || ok2 != refused {
			t.Fatalf("two compilations of %+v disagree on %q: (%q, %v) and (%q, %v)", rule, body, reason, refused, r2, ok2)
		}
		if refused != (reason != "") {
			t.Fatalf("Match(%q) = (%q, %v): a refusal needs a reason and only a refusal has one", body, reason, refused)
		}
		if r, ok := (*budget.RefusalMatcher)(nil).Match(body); ok || r != "" {
			t.Fatalf("a nil matcher refused %q: %q", body, r)
		}

		if field == "" {
			// A body rule is the regular expression over the whole body.
			if want := regexp.MustCompile(pattern).MatchString(body); refused != want {
				t.Fatalf("body rule %q on %q: refused=%v, regexp says %v", pattern, body, refused, want)
			}
			if refused && reason != fmt.Sprintf("body matches %q", pattern) {
				t.Fatalf("body rule %q: reason %q does not name the pattern", pattern, reason)
			}
			return
		}
		if refused {
			if !strings.HasPrefix(reason, "field "+field+" = ") {
				t.Fatalf("field rule %+v: reason %q does not name the field", rule, reason)
			}
			if equals != "" && !strings.HasPrefix(reason, fmt.Sprintf("field %s = %q", field, equals)) {
				t.Fatalf("field rule %+v: reason %q does not show the value that equalled %q", rule, reason, equals)
			}
		}
		// A field rule reads the JSON value: whitespace around the document
		// and re-encoding it (same values, numbers as written) cannot change
		// the decision.
		if r2, ok2 := m.Match(" \n\t" + body + "\r\n "); ok2 != refused || r2 != reason {
			t.Fatalf("field rule %+v: padding %q with whitespace changed (%q, %v) to (%q, %v)", rule, body, reason, refused, r2, ok2)
		}
		if reencoded, ok := reencodeJSON(body); ok {
			if r2, ok2 := m.Match(reencoded); ok2 != refused || r2 != reason {
				t.Fatalf("field rule %+v: %q re-encoded as %q changed (%q, %v) to (%q, %v)", rule, body, reencoded, reason, refused, r2, ok2)
			}
		}
	})
}

// FuzzRefusalIntegerRendering holds the documented rendering of numbers:
// a rule written as equals "402" matches 402, 402.0 and "402", whatever
// the number of digits, since a refusal code or an account number must
// compare by its digits and not as the nearest float64.
func FuzzRefusalIntegerRendering(f *testing.F) {
	for _, n := range []int64{0, 1, -1, 402, 9007199254740993, -9007199254740993, 1<<63 - 1, -1 << 63} {
		f.Add(n, uint8(0), uint8(1))
		f.Add(n, uint8(1), uint8(3))
		f.Add(n, uint8(2), uint8(0))
	}
	f.Fuzz(func(t *testing.T, n int64, form, zeros uint8) {
		digits := strconv.FormatInt(n, 10)
		var literal string
		switch form % 3 {
		case 0:
			literal = digits
		case 1:
			literal = digits + "." + strings.Repeat("0", 1+int(zeros%8))
		case 2:
			literal = strconv.Quote(digits)
		}
		m, err := budget.RefusalRules{{Field: "code", Equals: digits}}.Compile()
		if err != nil {
			t.Fatalf("Compile: %v", err)
		}
		body := `{"code": ` + literal + `}`
		if reason, refused := m.Match(body); !refused {
			t.Fatalf("equals %q does not match %s (reason %q)", digits, body, reason)
		}
		// And a different integer never matches.
		other := strconv.FormatInt(n^1, 10)
		if reason, refused := m.Match(`{"code": ` + other + `}`); refused {
			t.Fatalf("equals %q matched %s: %s", digits, other, reason)
		}
	})
}

// reencodeJSON decodes body as exactly one JSON value, keeping numbers as
// written, and encodes it again compactly with its object keys sorted.
func reencodeJSON(body string) (string, bool) {
	dec := json.NewDecoder(strings.NewReader(body))
	dec.UseNumber()
	var doc any
	if dec.Decode(&doc) != nil {
		return "", false
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return "", false
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if enc.Encode(doc) != nil {
		return "", false
	}
	return b.String(), true
}

// FuzzPriceTable parses a price table as a spec's prices: block carries
// it. A table that parses and validates prices every usage at a finite
// cost of 0 or more, that never falls as the tokens grow; a table that
// does not is refused with the entry named.
func FuzzPriceTable(f *testing.F) {
	for _, seed := range []string{
		`{"models": {"gpt-4o": {"input_per_million": 2.5, "output_per_million": 10, "cached_input_per_million": 1.25}}}`,
		`{"models": {"m": {"input_per_million": -1, "output_per_million": 1}}}`,
		`{"models": {"m": {"input_per_million": 1e308, "output_per_million": 1e308}}}`,
		`{"tool_call_usd": 0.01, "tools": {"search": 0.005, "payout": 1e7}}`,
		`{"tool_call_usd": -0.01}`,
		`{"models": {"m": {"input_per_million": "2.5"}}}`,
		`{"models": null, "tools": {"": 0}}`,
		`[]`,
	} {
		f.Add([]byte(seed), int64(1000), int64(200), int64(50))
	}
	f.Fuzz(func(t *testing.T, table []byte, input, output, cached int64) {
		var p budget.Prices
		if err := json.Unmarshal(table, &p); err != nil {
			return
		}
		if err := p.Validate(); err != nil {
			if !strings.HasPrefix(err.Error(), "prices.") {
				t.Fatalf("refusal %q names no entry of prices", err)
			}
			return
		}
		clamp := func(n int64) int64 { return min(max(n, 0), 10_000_000) }
		u := agentsagatype.Usage{InputTokens: clamp(input), OutputTokens: clamp(output), CachedInputTokens: clamp(cached)}
		more := u
		more.OutputTokens++
		more.InputTokens++
		for model := range p.Models {
			usd, next := p.ModelUSD(model, u), p.ModelUSD(model, more)
			if math.IsNaN(usd) || math.IsInf(usd, 0) || usd < 0 {
				t.Fatalf("%s: usage %+v costs %v", model, u, usd)
			}
			if next < usd {
				t.Fatalf("%s: one more token of each costs less: %v < %v", model, next, usd)
			}
		}
		for tool := range p.Tools {
			if usd := p.ToolUSD(tool, int(clamp(input)%100)); math.IsNaN(usd) || math.IsInf(usd, 0) || usd < 0 {
				t.Fatalf("tool %s costs %v", tool, usd)
			}
		}
	})
}
