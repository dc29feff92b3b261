package ledgerdb

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/quota"
)

// The fleet's rate limits (issue 22): one row per quota key
// (quota.Key: provider, model, a fingerprint of the API key) shared by
// every worker, changed only by the SQL functions of
// migrations/00015_quota.sql, each one round trip and atomic on the row:
//
//   - agentsaga_quota_ensure declares a key's limits (EnsureQuota);
//   - agentsaga_quota_admit admits a call before it is sent, or says when
//     it would fit (AdmitQuota);
//   - agentsaga_quota_settle gives back what a call reserved and did not
//     use, and frees its concurrency slot (SettleQuota);
//   - agentsaga_quota_close closes the key after a 429 (CloseQuota);
//   - agentsaga_quota_learn corrects the limits and levels with what the
//     provider's headers say (LearnQuota);
//   - agentsaga_quota_state reads it all without a lock (QuotaState).
//
// A model turn uses them inside its own two statements (migration 00016):
// its claim admits it (TurnRead.Quota, agentsaga_claim_quota_turn), handing
// a refused turn a release slot, and its settle settles, learns and closes
// (AttemptEnd.Quota, agentsaga_quota_answered).
//
// The limits are continuously refilled token buckets: a per-minute limit
// L admits at most L + L/60 x t over any t seconds, across the whole fleet
// (the migration explains why, and why the single row is not the fleet's
// ceiling). The limit in force is the lower of the declared and the
// learned one.

// ErrQuotaTooLarge is returned when a call needs more than a whole
// minute's limit of some dimension: it would never be admitted.
var ErrQuotaTooLarge = errors.New("the call needs more than the quota allows in a minute")

// DefaultQuotaLease is how long an admitted call holds its concurrency slot
// when AdmitQuota is given no lease: a worker that dies before settling
// frees it then.
const DefaultQuotaLease = 10 * time.Minute

// The reasons an admission is refused, besides ErrQuotaTooLarge.
const (
	QuotaClosed       = "closed"
	QuotaRequests     = "requests"
	QuotaTokens       = "tokens"
	QuotaInputTokens  = "input-tokens"
	QuotaOutputTokens = "output-tokens"
	QuotaConcurrency  = "concurrency"
)

// ErrQuotaWait is a turn's claim refused by its quota
// (TurnRead.Quota): nothing was claimed or sent, and the claim's
// Quota.RetryAt says when the turn may ask again.
var ErrQuotaWait = errors.New("the quota has no room for the call")

// QuotaClaim asks a model turn's claim to admit the turn on a quota first
// (TurnRead.Quota): one request, the conversation's tokens (the claim
// counts them) and Output tokens (max_tokens), and a concurrency slot
// leased for Lease (DefaultQuotaLease when 0).
type QuotaClaim struct {
	Key    string
	Output int64
	Lease  time.Duration
}

// QuotaAnswer is what a model call's response says of its quota, settled
// by the statement that settles the attempt (AttemptEnd.Quota): the
// admission's tokens are settled to Used (when it was admitted), the
// headers' limits and remaining counts are learned, and a 429 closes the
// key fleet-wide until ClosedUntil (zero: not a 429).
type QuotaAnswer struct {
	Admission   Admission
	Used        quota.Tokens
	Observed    quota.Observed
	ClosedUntil time.Time
}

// Admission is the limiter's answer to one call.
type Admission struct {
	// Key is the quota, and Reserved what an admitted call took (a turn's
	// claim counts its input tokens).
	Key      string
	Reserved quota.Tokens
	// Admitted: the call's requests and tokens (and a concurrency slot,
	// when one is declared) are taken; settle it with SettleQuota.
	Admitted bool
	// RetryAt, when not admitted, is the earliest time the call could fit
	// (or the end of a 429's closure). It reserves nothing: the caller
	// waits (durably, on a timer) and asks again.
	RetryAt time.Time
	// Reason, when not admitted, is the Quota* constant that waits longest.
	Reason string
	// At is the database's clock when it decided.
	At time.Time
}

// QuotaState is a key's state, refill included.
type QuotaState struct {
	Key string
	// The limits in force per minute, and the concurrency limit; 0 means
	// not limited.
	RequestsPerMinute, TokensPerMinute, InputTokensPerMinute, OutputTokensPerMinute float64
	Concurrency                                                                     int
	// The buckets' levels at At (NaN where not limited); a level may be
	// below zero after calls used more than they reserved.
	Requests, Tokens, InputTokens, OutputTokens float64
	// InFlight counts admitted calls not yet settled whose lease holds
	// (counted only while a concurrency limit is declared).
	InFlight int
	// ClosedUntil is the end of the last 429's closure (zero: never
	// closed); the key admits nothing before it.
	ClosedUntil time.Time
	// UpdatedAt is the row's last write, At the clock of this reading.
	UpdatedAt, At time.Time
	// Refused counts the admissions refused, and WaitedSeconds the waits
	// they were told (to their release slots); Waiting is the calls whose
	// slot is still ahead; RateLimited counts the 429s that closed the key.
	Refused, RateLimited int64
	WaitedSeconds        float64
	Waiting              int
}

// EnsureQuota declares a key's limits, creating its row, or changes them
// (the levels are settled and capped at the new limits; what was learned
// stays). Every worker may call it on start.
func (s *Store) EnsureQuota(ctx context.Context, key string, limits agentsagatype.RateLimit) error {
	if key == "" {
		return fmt.Errorf("ledger: ensure quota: the key is empty")
	}
	if err := limits.Validate(); err != nil {
		return fmt.Errorf("ledger: ensure quota %s: %w", key, err)
	}
	if _, err := s.pool.Exec(ctx, `SELECT agentsaga_quota_ensure($1, $2, $3, $4, $5, $6)`, key,
		perMinute(limits.RequestsPerMinute), perMinute(limits.TokensPerMinute),
		perMinute(limits.InputTokensPerMinute), perMinute(limits.OutputTokensPerMinute),
		concurrency(limits.Concurrency)); err != nil {
		return fmt.Errorf("ledger: ensure quota %s: %w", key, err)
	}
	return nil
}

// AdmitQuota admits a call before it is sent: requests requests (1 for a
// model turn) and tokens (the prompt's estimate as Input, max_tokens as
// Output), and a concurrency slot leased for lease (DefaultQuotaLease when
// 0; the activity's timeout is a good lease). A key with no row gets one,
// with nothing limited until it is declared or learned. A call that could
// never fit gets ErrQuotaTooLarge.
func (s *Store) AdmitQuota(ctx context.Context, key string, requests int, tokens quota.Tokens, lease time.Duration) (Admission, error) {
	if key == "" {
		return Admission{}, fmt.Errorf("ledger: admit quota: the key is empty")
	}
	if requests < 0 {
		return Admission{}, fmt.Errorf("ledger: admit quota %s: requests %d must not be negative", key, requests)
	}
	if err := tokens.Validate(); err != nil {
		return Admission{}, fmt.Errorf("ledger: admit quota %s: %w", key, err)
	}
	if lease < 0 {
		return Admission{}, fmt.Errorf("ledger: admit quota %s: lease %v must not be negative", key, lease)
	}
	if lease == 0 {
		lease = DefaultQuotaLease
	}
	a := Admission{Key: key, Reserved: tokens}
	var retryAt *time.Time
	var reason *string
	if err := s.pool.QueryRow(ctx, `SELECT admitted, retry_at, reason, at FROM agentsaga_quota_admit($1, $2, $3, $4, $5)`,
		key, requests, tokens.Input, tokens.Output, milliseconds(lease)).Scan(&a.Admitted, &retryAt, &reason, &a.At); err != nil {
		return Admission{}, fmt.Errorf("ledger: admit quota %s: %w", key, err)
	}
	if retryAt != nil {
		a.RetryAt = *retryAt
	}
	if reason != nil {
		a.Reason = *reason
	}
	if !a.Admitted && retryAt == nil {
		return Admission{}, fmt.Errorf("ledger: admit quota %s: %d requests, %d input and %d output tokens (%s): %w",
			key, requests, tokens.Input, tokens.Output, a.Reason, ErrQuotaTooLarge)
	}
	return a, nil
}

// SettleQuota settles an admitted call to the tokens it used, as the
// provider reports them: reserved minus used goes back (or, when it used
// more, the excess is taken), and its concurrency slot is freed. Settle
// once per admission, also when the call failed (used is then what the
// provider counted, often nothing). A key with no row is ErrNotFound.
func (s *Store) SettleQuota(ctx context.Context, key string, reserved, used quota.Tokens) error {
	if key == "" {
		return fmt.Errorf("ledger: settle quota: the key is empty")
	}
	if err := reserved.Validate(); err != nil {
		return fmt.Errorf("ledger: settle quota %s: reserved: %w", key, err)
	}
	if err := used.Validate(); err != nil {
		return fmt.Errorf("ledger: settle quota %s: used: %w", key, err)
	}
	var found bool
	if err := s.pool.QueryRow(ctx, `SELECT agentsaga_quota_settle($1, $2, $3, $4, $5)`,
		key, reserved.Input, reserved.Output, used.Input, used.Output).Scan(&found); err != nil {
		return fmt.Errorf("ledger: settle quota %s: %w", key, err)
	}
	if !found {
		return fmt.Errorf("ledger: settle quota %s: %w", key, ErrNotFound)
	}
	return nil
}

// CloseQuota closes the key fleet-wide until until (a 429's Retry-After or
// reset: quota.Observed.ClosedUntil), creating its row if need be, and
// returns the time it is closed until: a later closure extends, an earlier
// one never shortens it.
func (s *Store) CloseQuota(ctx context.Context, key string, until time.Time) (time.Time, error) {
	if key == "" {
		return time.Time{}, fmt.Errorf("ledger: close quota: the key is empty")
	}
	if until.IsZero() {
		return time.Time{}, fmt.Errorf("ledger: close quota %s: the time to close until is zero", key)
	}
	var closed time.Time
	if err := s.pool.QueryRow(ctx, `SELECT agentsaga_quota_close($1, $2)`, key, until).Scan(&closed); err != nil {
		return time.Time{}, fmt.Errorf("ledger: close quota %s: %w", key, err)
	}
	return closed, nil
}

// LearnQuota corrects the key's limits with what a response's headers say
// (quota.Parse): a limit the provider states is learned (the lower of it
// and the declared one is in force), and a remaining count below the
// bucket's level lowers the level. It writes nothing when the headers say
// nothing, and the database writes the row only when something changes. It
// does not close the key: on a 429, call CloseQuota too.
func (s *Store) LearnQuota(ctx context.Context, key string, o quota.Observed) error {
	if key == "" {
		return fmt.Errorf("ledger: learn quota: the key is empty")
	}
	for _, n := range []int64{o.RequestsLimit, o.RequestsRemaining, o.TokensLimit, o.TokensRemaining,
		o.InputTokensLimit, o.InputTokensRemaining, o.OutputTokensLimit, o.OutputTokensRemaining} {
		if n < 0 {
			return fmt.Errorf("ledger: learn quota %s: limits and remaining counts must not be negative: %+v", key, o)
		}
	}
	if o.RequestsLimit == 0 && o.TokensLimit == 0 && o.InputTokensLimit == 0 && o.OutputTokensLimit == 0 &&
		!o.RequestsRemainingKnown && !o.TokensRemainingKnown && !o.InputTokensRemainingKnown && !o.OutputTokensRemainingKnown {
		return nil
	}
	if _, err := s.pool.Exec(ctx, `SELECT agentsaga_quota_learn($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
		append([]any{key}, observedArgs(o)...)...); err != nil {
		return fmt.Errorf("ledger: learn quota %s: %w", key, err)
	}
	return nil
}

// QuotaState reads the key's state now, without a lock; ErrNotFound when
// the key has no row.
func (s *Store) QuotaState(ctx context.Context, key string) (QuotaState, error) {
	st, err := scanQuotaState(s.pool.QueryRow(ctx, quotaStateSQL+` WHERE q.key = $1`, key))
	if errors.Is(err, pgx.ErrNoRows) {
		return QuotaState{}, fmt.Errorf("ledger: quota state %s: %w", key, ErrNotFound)
	}
	if err != nil {
		return QuotaState{}, fmt.Errorf("ledger: quota state %s: %w", key, err)
	}
	return st, nil
}

// Quotas reads the state of every quota whose key begins with prefix
// ("openai:gpt-4o:" for one model's keys), in key order.
func (s *Store) Quotas(ctx context.Context, prefix string) ([]QuotaState, error) {
	rows, err := s.pool.Query(ctx, quotaStateSQL+` WHERE starts_with(q.key, $1) ORDER BY q.key`, prefix)
	if err != nil {
		return nil, fmt.Errorf("ledger: quotas %s: %w", prefix, err)
	}
	states, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (QuotaState, error) { return scanQuotaState(row) })
	if err != nil {
		return nil, fmt.Errorf("ledger: quotas %s: %w", prefix, err)
	}
	return states, nil
}

// quotaStateSQL reads quotas' states, refill included, for scanQuotaState.
const quotaStateSQL = `
	SELECT q.key, s.rpm, s.tpm, s.itpm, s.otpm, s.concurrency, s.requests, s.tokens, s.input_tokens, s.output_tokens,
	       s.in_flight, s.closed_until, s.updated_at, s.at,
	       q.refused, q.rate_limited, q.waited_seconds, cardinality(array(SELECT w FROM unnest(q.waiting) w WHERE w > s.at))
	FROM quota_limits q CROSS JOIN LATERAL agentsaga_quota_state(q.key) s`

func scanQuotaState(row pgx.Row) (QuotaState, error) {
	var st QuotaState
	var rpm, tpm, itpm, otpm, requests, tokens, input, output *float64
	var conc *int
	var closed *time.Time
	if err := row.Scan(&st.Key, &rpm, &tpm, &itpm, &otpm, &conc, &requests, &tokens, &input, &output, &st.InFlight, &closed,
		&st.UpdatedAt, &st.At, &st.Refused, &st.RateLimited, &st.WaitedSeconds, &st.Waiting); err != nil {
		return QuotaState{}, err
	}
	st.RequestsPerMinute, st.TokensPerMinute = orZero(rpm), orZero(tpm)
	st.InputTokensPerMinute, st.OutputTokensPerMinute = orZero(itpm), orZero(otpm)
	if conc != nil {
		st.Concurrency = *conc
	}
	st.Requests, st.Tokens, st.InputTokens, st.OutputTokens = orNaN(requests), orNaN(tokens), orNaN(input), orNaN(output)
	if closed != nil {
		st.ClosedUntil = *closed
	}
	return st, nil
}

// observedArgs are what agentsaga_quota_learn takes of o, in its order.
func observedArgs(o quota.Observed) []any {
	return []any{perMinute(o.RequestsLimit), remaining(o.RequestsRemaining, o.RequestsRemainingKnown),
		perMinute(o.TokensLimit), remaining(o.TokensRemaining, o.TokensRemainingKnown),
		perMinute(o.InputTokensLimit), remaining(o.InputTokensRemaining, o.InputTokensRemainingKnown),
		perMinute(o.OutputTokensLimit), remaining(o.OutputTokensRemaining, o.OutputTokensRemainingKnown)}
}

// perMinute is a limit as the functions take it: NULL when 0 (not said).
func perMinute(n int64) *float64 {
	if n <= 0 {
		return nil
	}
	f := float64(n)
	return &f
}

func concurrency(n int) *int32 {
	if n <= 0 {
		return nil
	}
	c := int32(min(n, 1<<31-1))
	return &c
}

func remaining(n int64, known bool) *float64 {
	if !known {
		return nil
	}
	f := float64(n)
	return &f
}

func orZero(f *float64) float64 {
	if f == nil {
		return 0
	}
	return *f
}

func orNaN(f *float64) float64 {
	if f == nil {
		return math.NaN()
	}
	return *f
}
