// Package budget owns the arithmetic of spending: a run's limits and usage
// across steps, leaf calls, tokens, USD and wall clock, and the
// classification of a failure as worth retrying or not. It is pure and
// stdlib-only, so the workflow can use it deterministically; its Postgres
// state lives in the ledger.
package budget

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Limits is what a run may spend. Steps (model turns) is required; any
// other dimension left at zero is not limited.
type Limits struct {
	Steps     int     `json:"steps"`
	LeafCalls int     `json:"leaf_calls,omitempty"`
	Tokens    int64   `json:"tokens,omitempty"`
	USD       float64 `json:"usd,omitempty"`
	Seconds   float64 `json:"seconds,omitempty"`
}

// UnmarshalJSON decodes limits strictly: an unknown dimension is an error,
// and so is one written down as zero or negative, because "tokens: 0" is a
// mistake, not a request for no limit (omit the field for that).
func (l *Limits) UnmarshalJSON(data []byte) error {
	var written struct {
		Steps     *int     `json:"steps"`
		LeafCalls *int     `json:"leaf_calls"`
		Tokens    *int64   `json:"tokens"`
		USD       *float64 `json:"usd"`
		Seconds   *float64 `json:"seconds"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&written); err != nil {
		return fmt.Errorf("budget: %w", err)
	}
	positive := func(name string, present bool, value float64) error {
		if present && value <= 0 {
			return fmt.Errorf("budget.%s: %v is not a budget; it must be positive (omit it for no limit)", name, value)
		}
		return nil
	}
	*l = Limits{}
	if written.Steps != nil {
		l.Steps = *written.Steps
	}
	if err := positive("steps", written.Steps != nil, float64(l.Steps)); err != nil {
		return err
	}
	if written.LeafCalls != nil {
		l.LeafCalls = *written.LeafCalls
	}
	if err := positive("leaf_calls", written.LeafCalls != nil, float64(l.LeafCalls)); err != nil {
		return err
	}
	if written.Tokens != nil {
		l.Tokens = *written.Tokens
	}
	if err := positive("tokens", written.Tokens != nil, float64(l.Tokens)); err != nil {
		return err
	}
	if written.USD != nil {
		l.USD = *written.USD
	}
	if err := positive("usd", written.USD != nil, l.USD); err != nil {
		return err
	}
	if written.Seconds != nil {
		l.Seconds = *written.Seconds
	}
	return positive("seconds", written.Seconds != nil, l.Seconds)
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
	return nil
}

// Usage is what a run has spent so far.
type Usage struct {
	Steps     int     `json:"steps"`
	LeafCalls int     `json:"leaf_calls"`
	Tokens    int64   `json:"tokens"`
	USD       float64 `json:"usd"`
}

// Exhausted names the first dimension whose limit usage has reached, or
// returns "" while there is budget left. Wall clock is the workflow's to
// check, since only it owns "now".
func (l Limits) Exhausted(u Usage) string {
	switch {
	case u.Steps >= l.Steps:
		return "steps"
	case l.LeafCalls > 0 && u.LeafCalls >= l.LeafCalls:
		return "leaf_calls"
	case l.Tokens > 0 && u.Tokens >= l.Tokens:
		return "tokens"
	case l.USD > 0 && u.USD >= l.USD:
		return "usd"
	}
	return ""
}
