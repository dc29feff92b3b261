package ledgerdb_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"math/big"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/agentsaga/agentsaga/internal/ledgerdb"
)

// FuzzFingerprint checks the request fingerprint that decides whether a
// second request under an idempotency key is the same request (its stored
// result is returned) or a different one (ErrConflict). It is
// deterministic and depends on the tool; re-encoding the arguments does not
// change it; and two requests that differ in any value, a number's last
// digit included, never share it, since sharing it would hand one
// request's stored result to another.
func FuzzFingerprint(f *testing.F) {
	for _, seed := range []struct{ tool1, args1, tool2, args2 string }{
		{"refund", `{"order": "A-1", "amount": 10}`, "refund", `{"amount":10,"order":"A-1"}`},
		{"refund", `{"amount": 10}`, "refund", `{"amount": 10.0}`},
		{"refund", `{"amount": 1e2}`, "refund", `{"amount": 100}`},
		{"refund", `{"amount": 0.1}`, "refund", `{"amount": 0.10000000000000001}`},
		{"refund", `{"amount": 10}`, "charge", `{"amount": 10}`},
		{"transfer", `{"account": 9007199254740993}`, "transfer", `{"account": 9007199254740992}`},
		{"transfer", `{"account": 12345678901234567890}`, "transfer", `{"account": 12345678901234567891}`},
		{"t", `{"x": 1e400}`, "t", `{"x": 1e400 }`},
		{"t", `{"x": 1e-400}`, "t", `{"x": 0}`},
		{"t", `{"x": -0}`, "t", `{"x": 0}`},
		{"t", `{"a": 1, "a": 2}`, "t", `{"a": 2}`},
		{"t", `"\u00e9"`, "t", `"é"`},
		{"t", `not json`, "t", `not json `},
		{"t", ``, "t", `null`},
		{"t", `[1, 2]`, "t", `[2, 1]`},
		{"t", `{} {}`, "t", `{}`},
	} {
		f.Add(seed.tool1, seed.args1, seed.tool2, seed.args2)
	}
	f.Fuzz(func(t *testing.T, tool1, args1, tool2, args2 string) {
		fp := func(tool, args string) string {
			return ledgerdb.ActionRequest{Key: "wf/step-001-call-1-" + tool, Tool: tool, Arguments: args}.Fingerprint()
		}
		fp1, fp2 := fp(tool1, args1), fp(tool2, args2)
		if again := fp(tool1, args1); again != fp1 {
			t.Fatalf("Fingerprint(%q, %q) is not deterministic", tool1, args1)
		}
		if len(fp1) != 64 {
			t.Fatalf("Fingerprint = %q, want 64 hex digits of SHA-256", fp1)
		}
		// Only the tool and the arguments count, not where the request
		// came from: the key is what names the request.
		if other := (ledgerdb.ActionRequest{Key: "x", WorkflowID: "w", ActivityID: "a", Tool: tool1, Arguments: args1}).Fingerprint(); other != fp1 {
			t.Fatalf("Fingerprint depends on the key or IDs")
		}
		if validTool(tool1) && validTool(tool2) && tool1 != tool2 && fp(tool2, args1) == fp1 {
			t.Fatalf("tools %q and %q share a fingerprint for %q", tool1, tool2, args1)
		}

		// Fingerprints stored before numbers were compared by value still
		// match wherever float64 held every number exactly.
		if old, ok := float64Fingerprint(tool1, args1); ok && allFloatExact(args1) && old != fp1 {
			t.Fatalf("the fingerprint of %q changed although float64 holds its numbers", args1)
		}

		// Re-encoding the same values, in another key order and spacing,
		// is the same request.
		if v, ok := decodeExact(args1); ok {
			reencoded, err := json.MarshalIndent(v, " ", "\t")
			if err != nil {
				t.Fatalf("re-encoding %q: %v", args1, err)
			}
			if utf8.ValidString(args1) && fp(tool1, string(reencoded)) != fp1 {
				t.Fatalf("%q re-encoded as %q changed the fingerprint", args1, reencoded)
			}
			// Changing one digit of one number is a different request.
			if number, ok := bumpFirstNumber(v); ok {
				bumped, err := json.Marshal(v)
				if err != nil {
					t.Fatalf("re-encoding %q: %v", args1, err)
				}
				if fp(tool1, string(bumped)) == fp1 {
					t.Fatalf("%q and %q (%s changed) share a fingerprint", args1, bumped, number)
				}
			}
		}

		if fp1 != fp2 || !utf8.ValidString(args1) || !utf8.ValidString(args2) {
			return
		}
		// The same fingerprint must mean the same request.
		if tool1 != tool2 && validTool(tool1) && validTool(tool2) {
			t.Fatalf("(%q, %q) and (%q, %q) share a fingerprint", tool1, args1, tool2, args2)
		}
		v1, ok1 := decodeExact(args1)
		v2, ok2 := decodeExact(args2)
		switch {
		case ok1 && ok2:
			if same, known := sameValue(v1, v2); known && !same {
				t.Fatalf("different arguments %q and %q share a fingerprint", args1, args2)
			}
		case ok1 != ok2:
			// Raw text is hashed as it is, canonical JSON as JSON: they
			// can only meet if the text is that canonical JSON.
			if !json.Valid([]byte(args1)) || !json.Valid([]byte(args2)) {
				t.Fatalf("JSON and non-JSON arguments %q and %q share a fingerprint", args1, args2)
			}
		default:
			if args1 != args2 {
				t.Fatalf("different non-JSON arguments %q and %q share a fingerprint", args1, args2)
			}
		}
	})
}

func validTool(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	for _, r := range name {
		if !(r == '_' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return false
		}
	}
	return true
}

// decodeExact reads s as exactly one JSON value with numbers as written.
func decodeExact(s string) (any, bool) {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return nil, false
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, false
	}
	return v, true
}

// sameValue compares two decoded JSON values, numbers by their exact
// decimal value (1.0 is 1, 2^53+1 is not 2^53). known is false when a
// number is too large to compare cheaply.
func sameValue(a, b any) (same, known bool) {
	switch a := a.(type) {
	case json.Number:
		b, ok := b.(json.Number)
		if !ok {
			return false, true
		}
		ra, okA := exactNumber(string(a))
		rb, okB := exactNumber(string(b))
		if !okA || !okB {
			return a == b, a == b
		}
		return ra.Cmp(rb) == 0, true
	case map[string]any:
		b, ok := b.(map[string]any)
		if !ok || len(a) != len(b) {
			return false, true
		}
		known = true
		for k, va := range a {
			vb, ok := b[k]
			if !ok {
				return false, true
			}
			s, kn := sameValue(va, vb)
			if kn && !s {
				return false, true
			}
			known = known && kn
		}
		return true, known
	case []any:
		b, ok := b.([]any)
		if !ok || len(a) != len(b) {
			return false, true
		}
		known = true
		for i := range a {
			s, kn := sameValue(a[i], b[i])
			if kn && !s {
				return false, true
			}
			known = known && kn
		}
		return true, known
	}
	return reflect.DeepEqual(a, b), true
}

// exactNumber is a JSON number as an exact rational, unless its exponent
// would make that expensive.
func exactNumber(s string) (*big.Rat, bool) {
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		if e, err := strconv.Atoi(s[i+1:]); err != nil || e > 1000 || e < -1000 {
			return nil, false
		}
	}
	return new(big.Rat).SetString(s)
}

// float64Fingerprint is the fingerprint as it was computed before numbers
// kept their digits: every number through float64.
func float64Fingerprint(tool, args string) (string, bool) {
	var v any
	if json.Unmarshal([]byte(args), &v) != nil {
		return "", false
	}
	canonical, err := json.Marshal(v)
	if err != nil {
		return "", false
	}
	sum := sha256.Sum256([]byte(tool + "\x00" + string(canonical)))
	return hex.EncodeToString(sum[:]), true
}

// allFloatExact reports whether every number in args has the value of the
// shortest decimal of its float64: what encoding/json writes back.
func allFloatExact(args string) bool {
	v, ok := decodeExact(args)
	if !ok {
		return false
	}
	var walk func(any) bool
	walk = func(v any) bool {
		switch v := v.(type) {
		case json.Number:
			f, err := strconv.ParseFloat(string(v), 64)
			if err != nil {
				return false
			}
			exact, ok := exactNumber(string(v))
			return ok && exact.Cmp(mustRat(strconv.FormatFloat(f, 'g', -1, 64))) == 0
		case map[string]any:
			for _, item := range v {
				if !walk(item) {
					return false
				}
			}
		case []any:
			for _, item := range v {
				if !walk(item) {
					return false
				}
			}
		}
		return true
	}
	return walk(v)
}

func mustRat(s string) *big.Rat {
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		panic("not a number: " + s)
	}
	return r
}

// bumpFirstNumber changes the last digit of the mantissa of the first
// number in v (object keys in order), which always changes its value.
func bumpFirstNumber(v any) (string, bool) {
	switch node := v.(type) {
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(node)) {
			if n, ok := node[k].(json.Number); ok {
				node[k] = bump(n)
				return string(n), true
			}
			if n, ok := bumpFirstNumber(node[k]); ok {
				return n, true
			}
		}
	case []any:
		for i, item := range node {
			if n, ok := item.(json.Number); ok {
				node[i] = bump(n)
				return string(n), true
			}
			if n, ok := bumpFirstNumber(item); ok {
				return n, true
			}
		}
	}
	return "", false
}

func bump(n json.Number) json.Number {
	s := string(n)
	end := len(s)
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		end = i
	}
	d := s[end-1]
	return json.Number(s[:end-1] + string('0'+(d-'0'+1)%10) + s[end:])
}
