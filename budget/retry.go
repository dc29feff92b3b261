package budget

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"time"
)

// RetryPolicy is a run's retry limits at every level the seed asks for: a
// count per call, a count per tool, and a ratio of the run's traffic,
// because a per-call count alone multiplies when everything fails at once.
// A zero field means its default (see WithDefaults), so a policy written
// with omitempty round-trips and a partly written one is completed.
type RetryPolicy struct {
	// MaxAttempts caps the attempts of one call, the first included.
	MaxAttempts int `json:"max_attempts,omitempty"`
	// ToolRetryCap caps the retries a run spends on any one tool.
	ToolRetryCap int `json:"tool_retry_cap,omitempty"`
	// ToolRetryCaps overrides ToolRetryCap per tool; a tool listed with 0
	// is never retried.
	ToolRetryCaps map[string]int `json:"tool_retry_caps,omitempty"`
	// Ratio is the share of the run's calls that may be retried.
	Ratio float64 `json:"ratio,omitempty"`
	// Floor is the retries a run may spend before the ratio applies, so a
	// short run can still survive a blip.
	Floor int `json:"floor,omitempty"`
	// BackoffBaseSeconds is the jitter ceiling of the first retry; it
	// doubles with each retry up to BackoffCapSeconds.
	BackoffBaseSeconds float64 `json:"backoff_base_seconds,omitempty"`
	BackoffCapSeconds  float64 `json:"backoff_cap_seconds,omitempty"`
}

// defaultRetryPolicy is the policy a spec's unset fields take
// (RetryPolicy{}.WithDefaults() is a copy of it). It is close to the
// seed's ledger: 3 attempts a call, retries on 20% of calls, and
// full-jitter backoff from 0.5 s up to 8 s; its floor and per-tool cap
// are looser than the seed's (5 and 6), at 10.
//
// Those two were the tight bound of a short run under an outage, and they
// cost successes: a call at 20% independent failure needs 0.24 retries on
// average, more than the ratio, so a 10-call run lives on its floor, and a
// floor of 5 left about one run in 24 short of a retry (`agentsaga bench
// success` ended 97.25-99.50% against an ideal 1-p^3 of 99.2%); a tool cap
// of 6 does the same to a run that calls one tool. An outage no longer needs
// them: the dependency's circuit breaker opens once it is down (3 failures
// in a row, DefaultBreaker) and parks the calls after that,
// and the fleet bucket caps the retries that all runs together get before
// it opens. With a floor of 10 a 10-call run runs short of a retry about
// once in 10,000 runs, and a run alone in a total outage still retries no
// more than its breaker lets fail. The ratio stays the bound of long runs.
var defaultRetryPolicy = RetryPolicy{
	MaxAttempts:        3,
	ToolRetryCap:       10,
	Ratio:              0.2,
	Floor:              10,
	BackoffBaseSeconds: 0.5,
	BackoffCapSeconds:  8,
}

// WithDefaults returns p with every zero field set from
// defaultRetryPolicy. ToolRetryCaps is shared, not copied.
func (p RetryPolicy) WithDefaults() RetryPolicy {
	d := defaultRetryPolicy
	if p.MaxAttempts == 0 {
		p.MaxAttempts = d.MaxAttempts
	}
	if p.ToolRetryCap == 0 {
		p.ToolRetryCap = d.ToolRetryCap
	}
	if p.Ratio == 0 {
		p.Ratio = d.Ratio
	}
	if p.Floor == 0 {
		p.Floor = d.Floor
	}
	if p.BackoffBaseSeconds == 0 {
		p.BackoffBaseSeconds = d.BackoffBaseSeconds
	}
	if p.BackoffCapSeconds == 0 {
		p.BackoffCapSeconds = d.BackoffCapSeconds
	}
	return p
}

// Validate reports the first field that cannot be a limit, naming it as
// it is spelled in JSON. The backoff base is compared with the cap after
// defaults, since a base above the default cap is as wrong as one above a
// written cap.
func (p RetryPolicy) Validate() error {
	for _, f := range []struct {
		name  string
		value int
	}{
		{"max_attempts", p.MaxAttempts},
		{"tool_retry_cap", p.ToolRetryCap},
		{"floor", p.Floor},
	} {
		if f.value < 0 {
			return fmt.Errorf("retry.%s: %d is negative", f.name, f.value)
		}
	}
	// Sorted so that the error named is the same every time.
	for _, tool := range slices.Sorted(maps.Keys(p.ToolRetryCaps)) {
		if c := p.ToolRetryCaps[tool]; c < 0 {
			return fmt.Errorf("retry.tool_retry_caps[%q]: %d is negative", tool, c)
		}
	}
	for _, f := range []struct {
		name  string
		value float64
	}{
		{"ratio", p.Ratio},
		{"backoff_base_seconds", p.BackoffBaseSeconds},
		{"backoff_cap_seconds", p.BackoffCapSeconds},
	} {
		switch {
		case math.IsNaN(f.value) || math.IsInf(f.value, 0):
			return fmt.Errorf("retry.%s: %v is not a finite number", f.name, f.value)
		case f.value < 0:
			return fmt.Errorf("retry.%s: %v is negative", f.name, f.value)
		}
	}
	if d := p.WithDefaults(); d.BackoffBaseSeconds > d.BackoffCapSeconds {
		return fmt.Errorf("retry.backoff_base_seconds: %v is more than backoff_cap_seconds %v",
			d.BackoffBaseSeconds, d.BackoffCapSeconds)
	}
	return nil
}

// ToolCap returns the retries the run may spend on tool: its own cap if
// ToolRetryCaps lists it, else ToolRetryCap (or its default).
func (p RetryPolicy) ToolCap(tool string) int {
	if c, ok := p.ToolRetryCaps[tool]; ok {
		return c
	}
	return p.WithDefaults().ToolRetryCap
}

// RunAllowance is the run's retry budget after calls logical calls:
// max(Floor, Ratio*calls), the Finagle and seed form. A retry is allowed
// while the run's retries so far are below it. Because the last retry is
// granted with retries < allowance and calls only grow, a run never
// retries more than Ratio*calls + Floor times, so it sends at most
// (1 + Ratio + Floor/calls) times the requests it would without retries:
// when everything fails, retries switch themselves off instead of
// multiplying the load.
func (p RetryPolicy) RunAllowance(calls int) float64 {
	d := p.WithDefaults()
	return max(float64(d.Floor), d.Ratio*float64(calls))
}

// Backoff returns the policy's backoff shape (defaults applied).
func (p RetryPolicy) Backoff() Backoff {
	d := p.WithDefaults()
	return Backoff{Base: secondsToDuration(d.BackoffBaseSeconds), Cap: secondsToDuration(d.BackoffCapSeconds)}
}

// Backoff shapes exponential backoff with full jitter: the ceiling starts
// at Base and doubles with each retry up to Cap.
type Backoff struct {
	Base, Cap time.Duration
}
