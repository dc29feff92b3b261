// Package quota reads what a model provider says about its rate limits and
// names the quota a call draws on. It is pure and stdlib only: the activity
// that makes a model call parses the response's headers with Parse, and the
// ledger's fleet limiter (ledgerdb.Store.AdmitQuota and the rest, migrations
// 00015 and 00016) keeps the shared state under the quota's Key.
//
// A provider limits an account (organization, project, API key) per model,
// in requests and tokens per minute, so the key is provider, model and a
// fingerprint of the API key, never the key itself.
package quota

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// FingerprintLen is how many hex digits of the API key's SHA-256 a Key
// keeps: 48 bits, enough to tell an account's keys apart, far too few to
// search for the key.
const FingerprintLen = 12

// Key is the quota's name in the ledger: provider + ":" + model + ":" + the
// first FingerprintLen hex digits of the API key's SHA-256. The key itself
// never appears in it, so the name may be logged, shown and stored. A
// model's name may contain ':' (Ollama's "llama3:8b"); the fingerprint has
// a fixed length, so the name still reads unambiguously from both ends.
func Key(provider, model, apiKey string) string {
	return provider + ":" + model + ":" + Fingerprint(apiKey)
}

// Fingerprint is the first FingerprintLen hex digits of apiKey's SHA-256.
func Fingerprint(apiKey string) string {
	sum := sha256.Sum256([]byte(apiKey))
	return hex.EncodeToString(sum[:])[:FingerprintLen]
}

// Tokens is a call's tokens: reserved at admission (the prompt's estimate
// as Input, max_tokens as Output) and used, as the provider reports them.
type Tokens struct {
	Input, Output int64
}

// Total is Input + Output.
func (t Tokens) Total() int64 { return t.Input + t.Output }

// Validate refuses negative counts, naming the side.
func (t Tokens) Validate() error {
	if t.Input < 0 {
		return fmt.Errorf("quota: input tokens %d must not be negative", t.Input)
	}
	if t.Output < 0 {
		return fmt.Errorf("quota: output tokens %d must not be negative", t.Output)
	}
	return nil
}

// Observed is what one response's headers say about the quota, in no
// provider's terms. A zero limit or time means the headers did not say (or
// said something unreadable). A remaining count of 0 is news, not absence
// (the window is spent), so each has a Known flag.
//
// Tokens are input and output together. Anthropic's anthropic-ratelimit-
// tokens-* headers describe the most restrictive of its input and output
// limits, not a combined one, so they fill Tokens only when the response
// has no input- or output-token headers (older API versions).
type Observed struct {
	RequestsLimit, RequestsRemaining int64
	RequestsRemainingKnown           bool
	RequestsReset                    time.Time

	TokensLimit, TokensRemaining int64
	TokensRemainingKnown         bool
	TokensReset                  time.Time

	InputTokensLimit, InputTokensRemaining int64
	InputTokensRemainingKnown              bool
	InputTokensReset                       time.Time

	OutputTokensLimit, OutputTokensRemaining int64
	OutputTokensRemainingKnown               bool
	OutputTokensReset                        time.Time

	// RetryAfter is when the provider asks to be called again
	// (retry-after-ms, else retry-after).
	RetryAfter time.Time
}

// Empty reports whether the headers said nothing Parse reads.
func (o Observed) Empty() bool { return o == Observed{} }

// ClosedUntil is how long a 429 closes the quota's window: RetryAfter when
// the provider sent it, else the latest reset of a dimension with nothing
// remaining, else now + fallback. It is never before now.
func (o Observed) ClosedUntil(now time.Time, fallback time.Duration) time.Time {
	if !o.RetryAfter.IsZero() {
		return later(o.RetryAfter, now)
	}
	var until time.Time
	for _, d := range []struct {
		known     bool
		remaining int64
		reset     time.Time
	}{
		{o.RequestsRemainingKnown, o.RequestsRemaining, o.RequestsReset},
		{o.TokensRemainingKnown, o.TokensRemaining, o.TokensReset},
		{o.InputTokensRemainingKnown, o.InputTokensRemaining, o.InputTokensReset},
		{o.OutputTokensRemainingKnown, o.OutputTokensRemaining, o.OutputTokensReset},
	} {
		if d.known && d.remaining == 0 && d.reset.After(until) {
			until = d.reset
		}
	}
	if until.IsZero() {
		return now.Add(max(fallback, 0))
	}
	return later(until, now)
}

// MaxHorizon bounds how far ahead a reset or Retry-After may point: one
// further than this (a day) is taken as a provider's mistake and ignored,
// so a bad header cannot close a quota fleet-wide for years. OpenAI's
// daily request limits reset within a day.
const MaxHorizon = 24 * time.Hour

// maxCount bounds a limit or remaining count: larger is not a count any
// provider sends, and it keeps sums of counts far from overflow.
const maxCount = 1 << 53

// Parse reads the rate-limit headers of an OpenAI or Anthropic response (or
// an OpenAI-compatible server that sends OpenAI's names), as seen at now.
// Unreadable values are ignored, never guessed at; a reset or Retry-After
// in the past reads as now.
//
// OpenAI: x-ratelimit-{limit,remaining}-{requests,tokens} are counts and
// x-ratelimit-reset-{requests,tokens} durations ("1s", "6m0s", "20ms",
// "1m30.5s"; some compatible servers send plain seconds). Anthropic:
// anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-
// {limit,remaining,reset}, the reset an RFC 3339 time. Both: retry-after
// (seconds or an HTTP date) and retry-after-ms, which wins when both are
// sent.
func Parse(h http.Header, now time.Time) Observed {
	var o Observed

	// OpenAI first: an OpenAI-compatible proxy in front of Anthropic
	// speaks for itself.
	o.RequestsLimit = limit(get(h, "x-ratelimit-limit-requests"))
	o.RequestsRemaining, o.RequestsRemainingKnown = count(get(h, "x-ratelimit-remaining-requests"))
	o.RequestsReset = afterDuration(get(h, "x-ratelimit-reset-requests"), now)
	o.TokensLimit = limit(get(h, "x-ratelimit-limit-tokens"))
	o.TokensRemaining, o.TokensRemainingKnown = count(get(h, "x-ratelimit-remaining-tokens"))
	o.TokensReset = afterDuration(get(h, "x-ratelimit-reset-tokens"), now)

	if o.RequestsLimit == 0 && !o.RequestsRemainingKnown && o.RequestsReset.IsZero() {
		o.RequestsLimit, o.RequestsRemaining, o.RequestsRemainingKnown, o.RequestsReset = anthropic(h, "requests", now)
	}
	o.InputTokensLimit, o.InputTokensRemaining, o.InputTokensRemainingKnown, o.InputTokensReset = anthropic(h, "input-tokens", now)
	o.OutputTokensLimit, o.OutputTokensRemaining, o.OutputTokensRemainingKnown, o.OutputTokensReset = anthropic(h, "output-tokens", now)
	sided := o.InputTokensLimit != 0 || o.InputTokensRemainingKnown || !o.InputTokensReset.IsZero() ||
		o.OutputTokensLimit != 0 || o.OutputTokensRemainingKnown || !o.OutputTokensReset.IsZero()
	if !sided && o.TokensLimit == 0 && !o.TokensRemainingKnown && o.TokensReset.IsZero() {
		o.TokensLimit, o.TokensRemaining, o.TokensRemainingKnown, o.TokensReset = anthropic(h, "tokens", now)
	}

	if ms := get(h, "retry-after-ms"); ms != "" {
		if v, err := strconv.ParseFloat(ms, 64); err == nil && v >= 0 && v <= float64(MaxHorizon/time.Millisecond) {
			o.RetryAfter = now.Add(time.Duration(v * float64(time.Millisecond)))
		}
	}
	if o.RetryAfter.IsZero() {
		o.RetryAfter = retryAfter(get(h, "retry-after"), now)
	}
	return o
}

// anthropic reads anthropic-ratelimit-<what>-{limit,remaining,reset}.
func anthropic(h http.Header, what string, now time.Time) (lim, remaining int64, known bool, reset time.Time) {
	prefix := "anthropic-ratelimit-" + what + "-"
	lim = limit(get(h, prefix+"limit"))
	remaining, known = count(get(h, prefix+"remaining"))
	reset = atTime(get(h, prefix+"reset"), now)
	return lim, remaining, known, reset
}

// get is the header's first value, trimmed. net/http canonicalizes names;
// a map built by hand may hold them in lower case.
func get(h http.Header, name string) string {
	v := h.Get(name)
	if v == "" {
		if vs := h[name]; len(vs) > 0 {
			v = vs[0]
		}
	}
	return strings.TrimSpace(v)
}

// count reads a non-negative count. Integers are expected; a float with
// an integral value ("100.0") is accepted, anything else ignored.
func count(s string) (int64, bool) {
	if s == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n < 0 || n > maxCount {
			return 0, false
		}
		return n, true
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 || f > maxCount || f != math.Trunc(f) {
		return 0, false
	}
	return int64(f), true
}

// limit reads a limit: a count above zero (a limit of 0 would close the
// quota for good, which no provider means by it).
func limit(s string) int64 {
	n, ok := count(s)
	if !ok {
		return 0
	}
	return n
}

// afterDuration reads OpenAI's reset, a Go-style duration ("6m0s",
// "20ms") or plain seconds ("1.5"), as a time after now.
func afterDuration(s string, now time.Time) time.Time {
	if s == "" {
		return time.Time{}
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		f, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil || math.IsNaN(f) || f > MaxHorizon.Seconds() {
			return time.Time{}
		}
		d = time.Duration(f * float64(time.Second))
	}
	if d < 0 || d > MaxHorizon {
		return time.Time{}
	}
	return now.Add(d)
}

// atTime reads Anthropic's reset, an RFC 3339 time, no earlier than now.
func atTime(s string, now time.Time) time.Time {
	if s == "" {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil || t.Sub(now) > MaxHorizon {
		return time.Time{}
	}
	return later(t, now)
}

// retryAfter reads Retry-After: whole (or, leniently, fractional) seconds,
// or an HTTP date, no earlier than now.
func retryAfter(s string, now time.Time) time.Time {
	if s == "" {
		return time.Time{}
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if f < 0 || math.IsNaN(f) || f > MaxHorizon.Seconds() {
			return time.Time{}
		}
		return now.Add(time.Duration(f * float64(time.Second)))
	}
	t, err := http.ParseTime(s)
	if err != nil || t.Sub(now) > MaxHorizon {
		return time.Time{}
	}
	return later(t, now)
}

// later is t in now's location, or now when t is before it.
func later(t, now time.Time) time.Time {
	if t.Before(now) {
		return now
	}
	return t.In(now.Location())
}
