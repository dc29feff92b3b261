package budget_test

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/budget"
)

// FuzzRetryableStatus checks the retry classifier over every status code
// and x-should-retry hint: it is deterministic, a hint the server sent
// always wins, and without one the documented split holds: 408, 409, 425,
// 429 and 5xx retry, every other 4xx does not.
func FuzzRetryableStatus(f *testing.F) {
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
		retryable := budget.RetryableStatus(status, shouldRetry)
		if again := budget.RetryableStatus(status, shouldRetry); again != retryable {
			t.Fatalf("RetryableStatus(%d, %v) is not deterministic: %v then %v", status, hint%3, retryable, again)
		}
		if shouldRetry != nil {
			if retryable != *shouldRetry {
				t.Fatalf("RetryableStatus(%d, x-should-retry %v) = %v: the server's hint must win", status, *shouldRetry, retryable)
			}
			return
		}
		switch {
		case status >= 500, status == 408, status == 409, status == 425, status == 429:
			if !retryable {
				t.Fatalf("RetryableStatus(%d) = false, want retryable", status)
			}
		case status >= 400:
			if retryable {
				t.Fatalf("RetryableStatus(%d) = true, want non-retryable: another attempt of a bad request only wastes budget", status)
			}
		}
	})
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
