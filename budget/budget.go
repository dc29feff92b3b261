package budget

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Limits is what a run may spend. Steps (model turns) is required; any
// other dimension left at zero is not limited.
type Limits struct {
	Steps     int     `json:"steps"`
	LeafCalls int     `json:"leaf_calls,omitempty"`
	Tokens    int64   `json:"tokens,omitempty"`
	USD       float64 `json:"usd,omitempty"`
	Seconds   float64 `json:"seconds,omitempty"`
	// Account is who pays for the run's calls ("acme/support"): each model
	// turn reserves its most expensive outcome against the account's spend
	// caps, and its parents', before it is sent (issue 31). Empty: no
	// account, no cap.
	Account string `json:"account,omitempty"`
}

// UnmarshalJSON decodes limits strictly: an unknown dimension is an error,
// and so is one written down as zero or negative, because "tokens: 0" is a
// mistake, not a request for no limit (omit the field for that).
func (l *Limits) UnmarshalJSON(data []byte) error {
	type plain Limits // without this method, so Decode does not recurse
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var decoded plain
	if err := dec.Decode(&decoded); err != nil {
		return fmt.Errorf("budget: %w", err)
	}
	var written map[string]any
	if err := json.Unmarshal(data, &written); err != nil {
		return fmt.Errorf("budget: %w", err)
	}
	for _, name := range []string{"steps", "leaf_calls", "tokens", "usd", "seconds"} {
		if value, ok := written[name].(float64); ok && value <= 0 {
			return fmt.Errorf("budget.%s: %v is not a budget; it must be positive (omit it for no limit)", name, value)
		}
	}
	*l = Limits(decoded)
	return nil
}

// Validate reports the first limit that cannot be a budget.
func (l Limits) Validate() error {
	switch {
	case l.Steps <= 0:
		return fmt.Errorf("budget.steps: %d; a run needs a positive step cap", l.Steps)
	case l.LeafCalls < 0:
		return fmt.Errorf("budget.leaf_calls: %d is negative", l.LeafCalls)
	case l.Tokens < 0:
		return fmt.Errorf("budget.tokens: %d is negative", l.Tokens)
	case l.USD < 0:
		return fmt.Errorf("budget.usd: %v is negative", l.USD)
	case l.Seconds < 0:
		return fmt.Errorf("budget.seconds: %v is negative", l.Seconds)
	}
	if l.Account != "" {
		if err := ValidateAccount(l.Account); err != nil {
			return fmt.Errorf("budget.account: %w", err)
		}
	}
	return nil
}

// ValidateAccount says what is wrong with an account path: names joined
// by "/" ("acme/support"), none of them empty or padded with spaces, in
// UTF-8 without control characters, at most 200 bytes.
func ValidateAccount(account string) error {
	switch {
	case account == "":
		return errors.New("account: empty")
	case len(account) > 200:
		return fmt.Errorf("account %.40q...: longer than 200 bytes", account)
	case !utf8.ValidString(account):
		return fmt.Errorf("account %q: not UTF-8", account)
	case strings.IndexFunc(account, unicode.IsControl) >= 0:
		return fmt.Errorf("account %q: contains a control character", account)
	}
	for _, part := range strings.Split(account, "/") {
		if part == "" || strings.TrimSpace(part) != part {
			return fmt.Errorf("account %q: each part of the path must be a name, not empty or padded with spaces", account)
		}
	}
	return nil
}

// Usage is what a run has spent so far.
type Usage struct {
	Steps     int     `json:"steps"`
	LeafCalls int     `json:"leaf_calls"`
	Tokens    int64   `json:"tokens"`
	USD       float64 `json:"usd"`
}

// Deadline is when the seconds limit runs out for a run that started at
// start, or the zero time when there is none.
func (l Limits) Deadline(start time.Time) time.Time {
	if l.Seconds <= 0 {
		return time.Time{}
	}
	return start.Add(secondsToDuration(l.Seconds))
}

// secondsToDuration converts configured seconds to a Duration, saturating
// where a plain conversion would overflow int64 and wrap to a negative
// (which would turn a generous limit into an immediate deadline).
func secondsToDuration(s float64) time.Duration {
	ns := s * float64(time.Second)
	switch {
	case math.IsNaN(ns):
		return 0
	case ns >= math.MaxInt64:
		return math.MaxInt64
	case ns <= math.MinInt64:
		return math.MinInt64
	}
	return time.Duration(ns)
}

// Unlimited is what Remaining reports for a dimension without a limit.
const Unlimited = -1

// Remaining is what is left of each dimension. A limited dimension never
// reports less than zero, even when overspent (Used keeps the overspend),
// so Unlimited (-1) cannot be mistaken for a remainder.
type Remaining struct {
	Steps     int
	LeafCalls int
	Tokens    int64
	USD       float64
	Seconds   float64
}
