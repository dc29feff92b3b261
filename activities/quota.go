package activities

// A model turn on its provider's quota (issue 22). A turn whose workflow
// asks for it (ModelCall.Quota) is admitted by its claim before anything
// is sent: one request, the conversation's tokens and max_tokens, on the
// quota of the provider, model and API key, which every worker of the
// fleet shares in the ledger. A turn that does not fit, or whose request
// was answered 429, fails with a budget.DenyQuota refusal that says when
// to come back; the workflow waits for then on a timer and sends the turn
// again under its first key. Neither costs a retry token or an attempt.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/quota"
	"github.com/agentsaga/agentsaga/internal/wire"
	"go.temporal.io/sdk/activity"
)

// defaultOutputReservation is what a turn reserves for its reply when the
// spec sets no max_tokens; the settle gives back what it did not use.
const defaultOutputReservation = 1024

// closedWithoutHint is how long a 429 that says nothing of when to come
// back closes the quota.
const closedWithoutHint = time.Second

// turnQuota is the quota a model turn draws on, or nil when it draws on
// none: the workflow did not ask (a run from before the quota), or the
// model is neither a built-in provider with rate-limit headers nor one
// whose spec declares its limits.
func (a *Activities) turnQuota(ctx context.Context, call wire.ModelCall) (*ledgerdb.QuotaClaim, error) {
	m := call.Model
	if !call.Quota || (m.RateLimit == nil && m.Provider != agentsagatype.ProviderOpenAI && m.Provider != agentsagatype.ProviderAnthropic) {
		return nil, nil
	}
	apiKey, err := a.apiKey(m)
	if err != nil {
		return nil, err
	}
	claim := &ledgerdb.QuotaClaim{Key: quota.Key(m.Provider, m.Name, apiKey), Output: m.MaxTokens}
	// A concurrency slot is held no longer than the attempt may last: a
	// worker that dies holding one frees it then.
	if deadline := activity.GetInfo(ctx).Deadline; !deadline.IsZero() {
		claim.Lease = max(time.Until(deadline), time.Second)
	}
	if claim.Output <= 0 {
		claim.Output = defaultOutputReservation
	}
	if m.RateLimit != nil {
		// Declared once per process for each key and set of limits: the
		// row keeps it for the fleet.
		declared := fmt.Sprintf("%s %+v", claim.Key, *m.RateLimit)
		if _, done := a.declaredQuotas.Load(declared); !done {
			if err := a.Ledger.EnsureQuota(ctx, claim.Key, *m.RateLimit); err != nil {
				return nil, err
			}
			a.declaredQuotas.Store(declared, true)
		}
	}
	return claim, nil
}

// rateLimited reports whether err is a provider's 429 for its rate limit.
// A 429 for an exhausted balance (OpenAI's insufficient_quota) is not: no
// wait ends it.
func rateLimited(err error) bool {
	var httpErr *HTTPError
	return errors.As(err, &httpErr) && httpErr.StatusCode == http.StatusTooManyRequests &&
		!strings.Contains(httpErr.Body, "insufficient_quota")
}

// headerSink is where a built-in model leaves its response's headers, for
// the quota to learn from.
type headerSink struct {
	header http.Header
	closed time.Time // closedUntil's answer, once asked
}

// closedUntil is until when a 429 closes the quota: the response's
// Retry-After, or the reset of what it has none left of.
func (s *headerSink) closedUntil() time.Time {
	if s.closed.IsZero() {
		now := time.Now()
		s.closed = quota.Parse(s.header, now).ClosedUntil(now, closedWithoutHint)
	}
	return s.closed
}

type headerSinkContext struct{}

func withHeaderSink(ctx context.Context) (context.Context, *headerSink) {
	sink := &headerSink{}
	return context.WithValue(ctx, headerSinkContext{}, sink), sink
}

// noteResponse keeps resp's headers for the call's quota, when the call
// has one.
func noteResponse(ctx context.Context, resp *http.Response) {
	if sink, ok := ctx.Value(headerSinkContext{}).(*headerSink); ok && resp != nil {
		sink.header = resp.Header.Clone()
	}
}

// answer is what the turn's response said of its quota, for the settle:
// the tokens used, what the headers say and, on a 429, until when the
// quota is closed.
func (s *headerSink) answer(admission ledgerdb.Admission, used agentsagatype.Usage, callErr error) *ledgerdb.QuotaAnswer {
	a := &ledgerdb.QuotaAnswer{Admission: admission, Observed: quota.Parse(s.header, time.Now()),
		Used: quota.Tokens{Input: used.InputTokens, Output: used.OutputTokens}}
	if rateLimited(callErr) {
		a.ClosedUntil = s.closedUntil()
	}
	return a
}
