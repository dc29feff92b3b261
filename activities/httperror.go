package activities

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agentsaga/agentsaga/internal/textclip"
)

// maxErrorBody caps how much of an error body an HTTPError keeps: enough to
// read the provider's message, small enough for workflow history.
const maxErrorBody = 512

// HTTPError is a non-2xx answer from a model provider or an HTTP tool. It keeps
// what the retry classifier needs: the status, the retry hints and a short body.
type HTTPError struct {
	Op          string        // what was being called, e.g. "openai chat.completions" or "tool search"
	StatusCode  int           // the HTTP status code
	RetryAfter  time.Duration // from Retry-After (seconds or HTTP date) or retry-after-ms; 0 if absent
	ShouldRetry *bool         // from x-should-retry: true/false; nil if absent
	Body        string        // at most 512 bytes of the body, for the error message
}

// Error reads like `openai chat.completions: HTTP 400: {"error":...}`.
func (e *HTTPError) Error() string {
	if e.Body == "" {
		return fmt.Sprintf("%s: HTTP %d", e.Op, e.StatusCode)
	}
	return fmt.Sprintf("%s: HTTP %d: %s", e.Op, e.StatusCode, e.Body)
}

// newHTTPError describes resp, whose body the caller has already read into
// body. It parses the retry headers so the classifier never needs resp again.
func newHTTPError(op string, resp *http.Response, body []byte) *HTTPError {
	e := &HTTPError{Op: op, Body: truncateBody(body)}
	if resp == nil {
		return e
	}
	e.StatusCode = resp.StatusCode
	e.RetryAfter = retryAfter(resp.Header, time.Now())
	switch strings.ToLower(strings.TrimSpace(resp.Header.Get("X-Should-Retry"))) {
	case "true":
		e.ShouldRetry = new(true)
	case "false":
		e.ShouldRetry = new(false)
	}
	return e
}

// readHTTPError is the error of a provider's non-2xx answer, whose body
// the SDK buffered: read (at most 64 KiB), with the API key redacted in
// case a server or proxy echoes the request's headers back.
func readHTTPError(op, apiKey string, resp *http.Response) *HTTPError {
	var body []byte
	if resp.Body != nil {
		body, _ = io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	}
	return newHTTPError(op, resp, []byte(newRedactor([]string{apiKey}).redact(string(body))))
}

// retryAfter prefers retry-after-ms, which OpenAI sends for sub-second
// waits, over Retry-After in seconds or as an HTTP date.
func retryAfter(h http.Header, now time.Time) time.Duration {
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 {
			return hintDuration(ms, time.Millisecond)
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s > 0 {
			return hintDuration(s, time.Second)
		}
		return 0
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// hintDuration is n units as a Duration, saturating at the largest one: a
// float past int64 (1e300, Inf) converts to a negative Duration, which
// reads as "no hint" and would drop the server's request to wait.
func hintDuration(n float64, unit time.Duration) time.Duration {
	if d := n * float64(unit); d < math.MaxInt64 {
		return time.Duration(d)
	}
	return math.MaxInt64
}

// truncateBody keeps the first maxErrorBody bytes without splitting a UTF-8
// character, so the message stays printable.
func truncateBody(body []byte) string {
	s, _ := textclip.CutAtRune(strings.TrimSpace(string(body)), maxErrorBody)
	return s
}
