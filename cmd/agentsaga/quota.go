package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
)

// runQuotas are the fleet's quotas of the run's models (its model and
// fallbacks), whatever the API key: show prints them so that an operator
// sees what the run shares with the fleet, and whether turns are waiting.
func runQuotas(ctx context.Context, store *ledgerdb.Store, spec []byte) ([]ledgerdb.QuotaState, error) {
	var parsed struct {
		Model agentsagatype.ModelSpec `json:"model"`
	}
	if len(spec) == 0 || json.Unmarshal(spec, &parsed) != nil {
		return nil, nil // a run recorded without its spec
	}
	var quotas []ledgerdb.QuotaState
	for _, m := range append([]agentsagatype.ModelSpec{parsed.Model}, parsed.Model.Fallbacks...) {
		if m.Name == "" {
			continue
		}
		states, err := store.Quotas(ctx, m.Provider+":"+m.Name+":")
		if err != nil {
			return nil, err
		}
		quotas = append(quotas, states...)
	}
	return quotas, nil
}

// printQuota prints one quota in a line: what is left of each limit, the
// turns waiting, the waits so far and the 429s.
func printQuota(out io.Writer, q ledgerdb.QuotaState) {
	var limits []string
	for _, d := range []struct {
		name         string
		left, minute float64
	}{
		{"requests", q.Requests, q.RequestsPerMinute},
		{"tokens", q.Tokens, q.TokensPerMinute},
		{"input tokens", q.InputTokens, q.InputTokensPerMinute},
		{"output tokens", q.OutputTokens, q.OutputTokensPerMinute},
	} {
		if d.minute > 0 {
			limits = append(limits, fmt.Sprintf("%s %.0f left of %.0f a minute", d.name, max(d.left, 0), d.minute))
		}
	}
	if q.Concurrency > 0 {
		limits = append(limits, fmt.Sprintf("%d of %d in flight", q.InFlight, q.Concurrency))
	}
	if len(limits) == 0 {
		limits = append(limits, "no limit declared or learned yet")
	}
	fmt.Fprintf(out, "quota %s: %s; %d turns waiting, %d waits (%s in all), %d answered 429",
		q.Key, strings.Join(limits, ", "), q.Waiting, q.Refused, (time.Duration(q.WaitedSeconds * float64(time.Second))).Round(time.Second), q.RateLimited)
	if q.ClosedUntil.After(q.At) {
		fmt.Fprintf(out, "; closed until %s", q.ClosedUntil.UTC().Format(time.RFC3339))
	}
	fmt.Fprintln(out)
}

// quotaView is a quota as `show --json` prints it: a level is null where
// nothing is limited.
type quotaView struct {
	ledgerdb.QuotaState
	Requests, Tokens, InputTokens, OutputTokens *float64
}

func newQuotaView(q ledgerdb.QuotaState) quotaView {
	level := func(f float64) *float64 {
		if math.IsNaN(f) {
			return nil
		}
		return &f
	}
	return quotaView{QuotaState: q, Requests: level(q.Requests), Tokens: level(q.Tokens),
		InputTokens: level(q.InputTokens), OutputTokens: level(q.OutputTokens)}
}
