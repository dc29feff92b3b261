package ledgerdb

import (
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
)

// canonicalArguments is arguments as one JSON value, re-encoded with object
// keys in order, or ok false when it is not exactly one JSON value. A number
// float64 holds exactly is re-encoded as a float64, as fingerprints always
// have been, so stored ones still match; any other number keeps its digits,
// since 9007199254740993 and 9007199254740992 (an account, an amount) are
// different requests that float64 would merge into one.
func canonicalArguments(arguments string) (string, bool) {
	dec := json.NewDecoder(strings.NewReader(arguments))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return "", false
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return "", false
	}
	canonical, err := json.Marshal(floatsWhereExact(v))
	if err != nil {
		return "", false
	}
	return string(canonical), true
}

func floatsWhereExact(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, item := range v {
			v[k] = floatsWhereExact(item)
		}
	case []any:
		for i, item := range v {
			v[i] = floatsWhereExact(item)
		}
	case json.Number:
		f, err := strconv.ParseFloat(string(v), 64)
		if err == nil && sameDecimal(string(v), strconv.FormatFloat(f, 'e', -1, 64)) {
			return f
		}
	}
	return v
}

// sameDecimal reports whether two JSON number literals have the same
// value, compared as decimal text so that no exponent costs more than its
// digits.
func sameDecimal(a, b string) bool {
	negA, digitsA, expA, okA := decimal(a)
	negB, digitsB, expB, okB := decimal(b)
	if !okA || !okB {
		return false
	}
	if digitsA == "" || digitsB == "" { // zero, whatever its sign
		return digitsA == digitsB
	}
	return negA == negB && digitsA == digitsB && expA == expB
}

// decimal splits a JSON number literal into its sign, its significant
// digits without leading or trailing zeros ("" for zero) and the exponent
// that goes with them; ok is false for an exponent beyond int32.
func decimal(num string) (neg bool, digits string, exp int64, ok bool) {
	num, neg = strings.CutPrefix(num, "-")
	mantissa, exponent, hasExp := strings.Cut(strings.ToLower(num), "e")
	if hasExp {
		e, err := strconv.ParseInt(exponent, 10, 32)
		if err != nil {
			return false, "", 0, false
		}
		exp = e
	}
	whole, frac, _ := strings.Cut(mantissa, ".")
	all := whole + frac
	exp -= int64(len(frac))
	trimmed := strings.TrimRight(all, "0")
	exp += int64(len(all) - len(trimmed))
	return neg, strings.TrimLeft(trimmed, "0"), exp, true
}
