package refusal

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/jsonpath"
)

// Rules are a tool's refusal rules (agentsagatype.RefusalRule); the first
// that matches decides.
type Rules []agentsagatype.RefusalRule

// Matcher is compiled Rules. Safe for concurrent use; a nil
// *Matcher refuses nothing.
type Matcher struct {
	rules     []compiledRefusal
	needsJSON bool
}

type compiledRefusal struct {
	field   string
	path    []string
	equals  string
	pattern *regexp.Regexp
}

// Compile checks every rule and prepares them for Match, so that a bad
// rule fails when the configuration loads rather than on the first
// response. Errors name the rule's index.
func (r Rules) Compile() (*Matcher, error) {
	m := &Matcher{rules: make([]compiledRefusal, 0, len(r))}
	for i, rule := range r {
		c := compiledRefusal{field: rule.Field, equals: rule.Equals}
		switch {
		case rule.Equals == "" && rule.Pattern == "":
			return nil, fmt.Errorf("refusal[%d]: needs equals or pattern; a rule that matches everything would refuse every answer", i)
		case rule.Equals != "" && rule.Field == "":
			return nil, fmt.Errorf("refusal[%d]: equals %q needs a field to compare (use pattern to match the whole body)", i, rule.Equals)
		}
		if rule.Field != "" {
			c.path = strings.Split(rule.Field, ".")
			for _, seg := range c.path {
				if seg == "" {
					return nil, fmt.Errorf("refusal[%d]: field %q has an empty path segment", i, rule.Field)
				}
			}
			m.needsJSON = true
		}
		if rule.Pattern != "" {
			re, err := regexp.Compile(rule.Pattern)
			if err != nil {
				return nil, fmt.Errorf("refusal[%d]: pattern %q does not compile: %w", i, rule.Pattern, err)
			}
			c.pattern = re
		}
		m.rules = append(m.rules, c)
	}
	return m, nil
}

// Match reports whether body is a refusal and, if so, which rule said so,
// as a reason fit for an error message: `field status = "declined"` or
// `body matches "insufficient funds"`. A body that is not JSON matches
// only the rules without a Field.
func (m *Matcher) Match(body string) (reason string, refused bool) {
	if m == nil {
		return "", false
	}
	var doc any
	parsed := false
	if m.needsJSON {
		// Parsed once for all the field rules.
		doc, parsed = parseJSON(body)
	}
	for _, rule := range m.rules {
		if rule.field == "" {
			if rule.pattern.MatchString(body) {
				return fmt.Sprintf("body matches %q", rule.pattern.String()), true
			}
			continue
		}
		if !parsed {
			continue
		}
		value, ok := jsonpath.Lookup(doc, rule.path)
		if !ok {
			continue
		}
		text := render(value)
		if rule.equals != "" && text != rule.equals {
			continue
		}
		if rule.pattern != nil && !rule.pattern.MatchString(text) {
			continue
		}
		switch {
		case rule.pattern == nil:
			return fmt.Sprintf("field %s = %q", rule.field, text), true
		case rule.equals == "":
			return fmt.Sprintf("field %s = %q matches %q", rule.field, text, rule.pattern.String()), true
		default:
			return fmt.Sprintf("field %s = %q and matches %q", rule.field, text, rule.pattern.String()), true
		}
	}
	return "", false
}

// parseJSON decodes body as exactly one JSON value. Numbers stay
// json.Number so large integers compare by their digits, not as the
// nearest float64.
func parseJSON(body string) (any, bool) {
	dec := json.NewDecoder(strings.NewReader(body))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, false
	}
	// Trailing data means the body was not one JSON document.
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, false
	}
	return doc, true
}

// render turns a JSON value into the string rules compare, so that a rule
// written as equals "402" matches both 402 and 402.0 and "402".
func render(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case json.Number:
		s := v.String()
		if !strings.ContainsAny(s, ".eE") {
			return s // an integer literal: its digits, exactly, however long
		}
		if whole, frac, _ := strings.Cut(s, "."); !strings.ContainsAny(s, "eE") && strings.Trim(frac, "0") == "" {
			// 402.0 is the integer 402 however many digits it has; going
			// through float64 would round one past 2^53.
			return whole
		}
		if f, err := v.Float64(); err == nil {
			if math.Abs(f) >= 1e21 { // as encoding/json does, not 300 digits
				return strconv.FormatFloat(f, 'g', -1, 64)
			}
			return strconv.FormatFloat(f, 'f', -1, 64)
		}
		return s
	case bool:
		return strconv.FormatBool(v)
	case nil:
		return "null"
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return ""
	}
	return strings.TrimSuffix(b.String(), "\n")
}
