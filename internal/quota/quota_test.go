package quota_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/internal/quota"
)

var now = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

func headers(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

func TestParse(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		h    http.Header
		want quota.Observed
	}{{
		name: "openai",
		h: headers(
			"x-ratelimit-limit-requests", "60",
			"x-ratelimit-limit-tokens", "150000",
			"x-ratelimit-remaining-requests", "59",
			"x-ratelimit-remaining-tokens", "149984",
			"x-ratelimit-reset-requests", "1s",
			"x-ratelimit-reset-tokens", "6m0s"),
		want: quota.Observed{
			RequestsLimit: 60, RequestsRemaining: 59, RequestsRemainingKnown: true, RequestsReset: now.Add(time.Second),
			TokensLimit: 150000, TokensRemaining: 149984, TokensRemainingKnown: true, TokensReset: now.Add(6 * time.Minute),
		},
	}, {
		name: "openai 429, spent, with retry-after-ms and retry-after",
		h: headers(
			"x-ratelimit-limit-requests", "10000",
			"x-ratelimit-remaining-requests", "0",
			"x-ratelimit-reset-requests", "20ms",
			"x-ratelimit-limit-tokens", "2000000",
			"x-ratelimit-remaining-tokens", "0",
			"x-ratelimit-reset-tokens", "1m30.5s",
			"retry-after-ms", "1500",
			"retry-after", "2"),
		want: quota.Observed{
			RequestsLimit: 10000, RequestsRemaining: 0, RequestsRemainingKnown: true, RequestsReset: now.Add(20 * time.Millisecond),
			TokensLimit: 2000000, TokensRemaining: 0, TokensRemainingKnown: true, TokensReset: now.Add(90500 * time.Millisecond),
			RetryAfter: now.Add(1500 * time.Millisecond),
		},
	}, {
		name: "compatible server: plain-seconds reset, lower-case map",
		h: http.Header{
			"x-ratelimit-limit-requests":     {"30"},
			"x-ratelimit-remaining-requests": {"29"},
			"x-ratelimit-reset-requests":     {"2.5"},
		},
		want: quota.Observed{RequestsLimit: 30, RequestsRemaining: 29, RequestsRemainingKnown: true, RequestsReset: now.Add(2500 * time.Millisecond)},
	}, {
		name: "anthropic",
		h: headers(
			"anthropic-ratelimit-requests-limit", "50",
			"anthropic-ratelimit-requests-remaining", "49",
			"anthropic-ratelimit-requests-reset", "2026-12-02T10:00:01Z",
			"anthropic-ratelimit-tokens-limit", "8000",
			"anthropic-ratelimit-tokens-remaining", "7000",
			"anthropic-ratelimit-tokens-reset", "2026-12-02T10:00:08Z",
			"anthropic-ratelimit-input-tokens-limit", "40000",
			"anthropic-ratelimit-input-tokens-remaining", "39000",
			"anthropic-ratelimit-input-tokens-reset", "2026-12-02T10:00:02Z",
			"anthropic-ratelimit-output-tokens-limit", "8000",
			"anthropic-ratelimit-output-tokens-remaining", "7000",
			"anthropic-ratelimit-output-tokens-reset", "2026-12-02T10:00:08.5+00:00"),
		// The tokens-* headers are the stricter of input and output,
		// not a combined limit: they stay out of Tokens.
		want: quota.Observed{
			RequestsLimit: 50, RequestsRemaining: 49, RequestsRemainingKnown: true, RequestsReset: now.Add(time.Second),
			InputTokensLimit: 40000, InputTokensRemaining: 39000, InputTokensRemainingKnown: true, InputTokensReset: now.Add(2 * time.Second),
			OutputTokensLimit: 8000, OutputTokensRemaining: 7000, OutputTokensRemainingKnown: true, OutputTokensReset: now.Add(8500 * time.Millisecond),
		},
	}, {
		name: "anthropic without sided headers, 429 with retry-after",
		h: headers(
			"anthropic-ratelimit-tokens-limit", "100000",
			"anthropic-ratelimit-tokens-remaining", "0",
			"anthropic-ratelimit-tokens-reset", "2026-12-02T10:00:30Z",
			"retry-after", "30"),
		want: quota.Observed{
			TokensLimit: 100000, TokensRemaining: 0, TokensRemainingKnown: true, TokensReset: now.Add(30 * time.Second),
			RetryAfter: now.Add(30 * time.Second),
		},
	}, {
		name: "retry-after as an HTTP date; a reset in the past reads as now",
		h: headers(
			"retry-after", "Wed, 02 Dec 2026 10:01:00 GMT",
			"anthropic-ratelimit-requests-reset", "2026-12-02T09:59:00Z"),
		want: quota.Observed{RequestsReset: now, RetryAfter: now.Add(time.Minute)},
	}, {
		name: "malformed values are ignored",
		h: headers(
			"x-ratelimit-limit-requests", "-5",
			"x-ratelimit-remaining-requests", "lots",
			"x-ratelimit-reset-requests", "-1s",
			"x-ratelimit-limit-tokens", "1e400",
			"x-ratelimit-remaining-tokens", "12.5",
			"x-ratelimit-reset-tokens", "9999999h",
			"anthropic-ratelimit-input-tokens-limit", "NaN",
			"anthropic-ratelimit-input-tokens-reset", "tomorrow",
			"retry-after-ms", "-3",
			"retry-after", "Inf"),
		want: quota.Observed{},
	}, {
		name: "a zero limit is unknown, a zero remaining is known",
		h: headers(
			"x-ratelimit-limit-requests", "0",
			"x-ratelimit-remaining-requests", "0"),
		want: quota.Observed{RequestsRemainingKnown: true},
	}, {
		name: "resets past the horizon are ignored",
		h: headers(
			"x-ratelimit-reset-requests", "25h",
			"anthropic-ratelimit-tokens-reset", "2036-01-01T00:00:00Z",
			"retry-after", "31536000"),
		want: quota.Observed{},
	}, {
		name: "nothing",
		h:    http.Header{"Content-Type": {"application/json"}},
		want: quota.Observed{},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := quota.Parse(tc.h, now)
			assert.Equal(t, tc.want, got)
		})
	}
	assert.True(t, quota.Parse(nil, now).Empty(), "a nil header is no news")
}

func TestClosedUntil(t *testing.T) {
	t.Parallel()
	o := quota.Parse(headers("x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "3s",
		"x-ratelimit-remaining-tokens", "10", "x-ratelimit-reset-tokens", "50s"), now)
	assert.Equal(t, now.Add(3*time.Second), o.ClosedUntil(now, time.Second), "the spent dimension's reset, not the other")
	o.RetryAfter = now.Add(7 * time.Second)
	assert.Equal(t, now.Add(7*time.Second), o.ClosedUntil(now, time.Second), "Retry-After wins")
	assert.Equal(t, now.Add(time.Second), quota.Observed{}.ClosedUntil(now, time.Second), "nothing said: the fallback")
}

func TestKeyNeverHoldsTheAPIKey(t *testing.T) {
	t.Parallel()
	apiKey := "sk-proj-Abc123xyzSECRETsecret0987654321"
	key := quota.Key("openai", "gpt-4o-mini", apiKey)
	assert.Equal(t, "openai:gpt-4o-mini:"+quota.Fingerprint(apiKey), key)
	assert.Len(t, quota.Fingerprint(apiKey), quota.FingerprintLen)
	assert.Regexp(t, `^[0-9a-f]{12}$`, quota.Fingerprint(apiKey))
	assert.NotContains(t, key, apiKey)
	for _, part := range []string{"sk-proj", "SECRET", "secret", "0987654321"} {
		assert.NotContains(t, key, part)
	}
	assert.Equal(t, key, quota.Key("openai", "gpt-4o-mini", apiKey), "deterministic")
	assert.NotEqual(t, key, quota.Key("openai", "gpt-4o-mini", apiKey+"x"), "another key, another quota")
	assert.NotEqual(t, key, quota.Key("openai", "gpt-4o", apiKey), "another model, another quota")
	assert.Equal(t, "ollama:llama3:8b:"+quota.Fingerprint(""), quota.Key("ollama", "llama3:8b", ""))
}

func TestTokensValidate(t *testing.T) {
	t.Parallel()
	require.NoError(t, quota.Tokens{Input: 10}.Validate())
	err := quota.Tokens{Output: -3}.Validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "output tokens -3 must not be negative")
	assert.EqualValues(t, 13, quota.Tokens{Input: 10, Output: 3}.Total())
}

var known = []string{
	"x-ratelimit-limit-requests", "x-ratelimit-limit-tokens",
	"x-ratelimit-remaining-requests", "x-ratelimit-remaining-tokens",
	"x-ratelimit-reset-requests", "x-ratelimit-reset-tokens",
	"anthropic-ratelimit-requests-limit", "anthropic-ratelimit-requests-remaining", "anthropic-ratelimit-requests-reset",
	"anthropic-ratelimit-tokens-limit", "anthropic-ratelimit-tokens-remaining", "anthropic-ratelimit-tokens-reset",
	"anthropic-ratelimit-input-tokens-limit", "anthropic-ratelimit-input-tokens-remaining", "anthropic-ratelimit-input-tokens-reset",
	"anthropic-ratelimit-output-tokens-limit", "anthropic-ratelimit-output-tokens-remaining", "anthropic-ratelimit-output-tokens-reset",
	"retry-after", "retry-after-ms",
}

// FuzzParse: any header block, and any value under every header Parse
// reads, parses without a panic into counts that are never negative and
// times that are never before now nor past the horizon.
func FuzzParse(f *testing.F) {
	f.Add("x-ratelimit-limit-requests: 60\nx-ratelimit-remaining-requests: 59\nx-ratelimit-reset-requests: 1s\nx-ratelimit-reset-tokens: 6m0s", "1m30.5s")
	f.Add("anthropic-ratelimit-input-tokens-limit: 40000\nanthropic-ratelimit-input-tokens-reset: 2026-12-02T10:00:02Z\nretry-after: 30", "2026-12-02T10:00:08Z")
	f.Add("retry-after: Wed, 02 Dec 2026 10:01:00 GMT\nretry-after-ms: 1500", "Wed, 02 Dec 2026 10:01:00 GMT")
	f.Add("x-ratelimit-remaining-tokens: -1\nretry-after: -5", "-9223372036854775808")
	f.Add("", "9223372036854775807")
	f.Add("x-ratelimit-reset-tokens: 2562047h47m16.854775807s", "1e308")
	f.Add("retry-after-ms: NaN", "NaN")
	f.Fuzz(func(t *testing.T, block, value string) {
		h := http.Header{}
		for _, line := range strings.Split(block, "\n") {
			if name, v, ok := strings.Cut(line, ":"); ok {
				h.Add(strings.TrimSpace(name), v)
			}
		}
		check(t, quota.Parse(h, now))
		all := http.Header{}
		for _, name := range known {
			all.Set(name, value)
		}
		check(t, quota.Parse(all, now))
		o := quota.Parse(all, now)
		until := o.ClosedUntil(now, time.Second)
		if until.Before(now) || until.Sub(now) > quota.MaxHorizon {
			t.Fatalf("closed until %v, now %v", until, now)
		}
	})
}

func check(t *testing.T, o quota.Observed) {
	t.Helper()
	for _, n := range []int64{o.RequestsLimit, o.RequestsRemaining, o.TokensLimit, o.TokensRemaining,
		o.InputTokensLimit, o.InputTokensRemaining, o.OutputTokensLimit, o.OutputTokensRemaining} {
		if n < 0 {
			t.Fatalf("negative count in %+v", o)
		}
	}
	for _, at := range []time.Time{o.RequestsReset, o.TokensReset, o.InputTokensReset, o.OutputTokensReset, o.RetryAfter} {
		if at.IsZero() {
			continue
		}
		if at.Before(now) || at.Sub(now) > quota.MaxHorizon {
			t.Fatalf("time %v out of [now, now+horizon] in %+v", at, o)
		}
	}
}
