package refusal_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/refusal"
)

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
		rule := agentsagatype.RefusalRule{Field: field, Equals: equals, Pattern: pattern}
		m, err := refusal.Rules{rule}.Compile()

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
		m2, _ := refusal.Rules{rule}.Compile()
		if r2, ok2 := m2.Match(body); r2 != reason || ok2 != refused {
			t.Fatalf("two compilations of %+v disagree on %q: (%q, %v) and (%q, %v)", rule, body, reason, refused, r2, ok2)
		}
		if refused != (reason != "") {
			t.Fatalf("Match(%q) = (%q, %v): a refusal needs a reason and only a refusal has one", body, reason, refused)
		}
		if r, ok := (*refusal.Matcher)(nil).Match(body); ok || r != "" {
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
		m, err := refusal.Rules{{Field: "code", Equals: digits}}.Compile()
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
