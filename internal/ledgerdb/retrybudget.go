package ledgerdb

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentsaga/agentsaga/budget"
)

// The fleet's shared retry state lives in Postgres functions, which are
// the contract for workers in every language. Each is defined, as the
// methods below call it, in the last migration that changed it:
//
//   - the bucket (agentsaga_bucket_refilled, _ensure, _take, _deposit,
//     _level) and agentsaga_retry_decide: 00002_retry_budget.sql;
//   - agentsaga_record_success: 00005_cool_success_path.sql;
//   - agentsaga_breaker_pace (7 arguments), which spaces and learns the
//     adaptive release rate: 00018_adaptive_release.sql;
//   - agentsaga_breaker_report (12 arguments), which also grows the probe
//     interval of an outage that lasts: 00020_probe_backoff.sql;
//   - agentsaga_breaker_gate (10 arguments), 00020's gate, which also
//     leaves the calls that keep arriving their share of the dependency
//     when it spaces the release slots: 00032_fresh_demand.sql.
//
// Older versions stay for the workers of older builds: 00002's
// agentsaga_breaker_allow (as 00005 redefined it) and
// agentsaga_breaker_record, 00010's 2-argument, 00012's 3-argument,
// 00014's 4-argument, 00018's 7-argument and 00020's 9-argument
// agentsaga_breaker_gate,
// 00014's 5-argument and 00018's 9-argument agentsaga_breaker_report and
// 00017's 2-argument agentsaga_breaker_pace.
// The methods below are thin wrappers: one round trip each, and each
// atomic in the database.

// EnsureBucket creates the named token bucket full, or reshapes an
// existing one (its level is settled and capped at the new capacity).
func (s *Store) EnsureBucket(ctx context.Context, name string, cfg budget.BucketConfig) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("ledger: ensure bucket %s: %w", name, err)
	}
	if _, err := s.pool.Exec(ctx, `SELECT agentsaga_bucket_ensure($1, $2, $3, $4)`,
		name, cfg.Capacity, cfg.RefillPerSecond, cfg.SuccessBonus); err != nil {
		return fmt.Errorf("ledger: ensure bucket %s: %w", name, err)
	}
	return nil
}

// depositToBucket puts amount tokens back, capped at capacity, and returns
// the new level.
func (s *Store) depositToBucket(ctx context.Context, name string, amount float64) (float64, error) {
	if amount < 0 {
		return 0, fmt.Errorf("ledger: deposit to bucket %s: amount %v must not be negative", name, amount)
	}
	var level *float64
	if err := s.pool.QueryRow(ctx, `SELECT agentsaga_bucket_deposit($1, $2)`, name, amount).Scan(&level); err != nil {
		return 0, fmt.Errorf("ledger: deposit to bucket %s: %w", name, err)
	}
	if level == nil {
		return 0, fmt.Errorf("ledger: deposit to bucket %s: %w", name, ErrNotFound)
	}
	return *level, nil
}

// DepositUnlessFull puts amount tokens into the bucket (with its refill,
// capped at capacity) in one statement, and writes nothing when the bucket
// is already full: the fleet's one hot row takes no commit for a deposit
// that could not raise it. It reports whether it wrote.
func (s *Store) DepositUnlessFull(ctx context.Context, name string, amount float64) (bool, error) {
	if amount < 0 {
		return false, fmt.Errorf("ledger: deposit to bucket %s: amount %v must not be negative", name, amount)
	}
	tag, err := s.pool.Exec(ctx, `
		WITH now AS MATERIALIZED (SELECT clock_timestamp() AS t)
		UPDATE retry_buckets AS b
		SET tokens     = least(b.capacity,
		                       agentsaga_bucket_refilled(b.tokens, b.capacity, b.refill_per_second, b.updated_at, now.t) + $2),
		    updated_at = greatest(b.updated_at, now.t)
		FROM now
		WHERE b.name = $1
		  AND agentsaga_bucket_refilled(b.tokens, b.capacity, b.refill_per_second, b.updated_at, now.t) < b.capacity`,
		name, amount)
	if err != nil {
		return false, fmt.Errorf("ledger: deposit to bucket %s: %w", name, err)
	}
	return tag.RowsAffected() == 1, nil
}

// RetryRequest is one retry to pay for, after a retryable failure.
type RetryRequest struct {
	// ChargeKey makes the payment idempotent: workflow ID, activity ID and
	// attempt. The same key again returns the first decision.
	ChargeKey  string
	WorkflowID string
	// Tool is the per-tool cap's key; ToolCap the run's retries of it.
	Tool    string
	ToolCap int
	// RunAllowance is how many retries the whole run may take so far.
	RunAllowance float64
	// Bucket is the fleet bucket (it must exist); Dependency the breaker
	// (empty skips it).
	Bucket, Dependency string
}

// DecideRetry pays for a retry atomically: the per-tool cap, the run's
// allowance, the dependency's breaker and the fleet bucket, in that order.
// It returns budget.Granted or the budget.Deny* constant of the budget that
// said no; only a grant charges anything.
func (s *Store) DecideRetry(ctx context.Context, req RetryRequest) (string, error) {
	var decision *string
	err := s.pool.QueryRow(ctx, `SELECT agentsaga_retry_decide($1, $2, $3, $4, $5, $6, $7)`,
		req.ChargeKey, req.WorkflowID, req.Tool, req.ToolCap, req.RunAllowance, req.Bucket, req.Dependency).Scan(&decision)
	if err != nil {
		return "", fmt.Errorf("ledger: decide retry %s: %w", req.ChargeKey, err)
	}
	if decision == nil {
		return "", fmt.Errorf("ledger: decide retry %s: no decision stored", req.ChargeKey)
	}
	return *decision, nil
}

// recordSuccess reports a successful attempt once per charge key: it
// deposits bonus into the bucket (an empty bucket name skips it) and tells
// the dependency's breaker, as its probe when probe is true. Today's retry
// hook batches its deposits (DepositUnlessFull) instead; this, and the SQL
// function behind it, stay for the workers of older builds that share the
// fleet's ledger during a deploy.
func (s *Store) recordSuccess(ctx context.Context, chargeKey, bucket string, bonus float64, dependency string, probe bool) error {
	if bonus < 0 {
		return fmt.Errorf("ledger: record success %s: bonus %v must not be negative", chargeKey, bonus)
	}
	if _, err := s.pool.Exec(ctx, `SELECT agentsaga_record_success($1, $2, $3, $4, $5)`,
		chargeKey, bucket, bonus, dependency, probe); err != nil {
		return fmt.Errorf("ledger: record success %s: %w", chargeKey, err)
	}
	return nil
}

// BreakerProbe is a gate's answer, besides budget.BreakerClosed and
// budget.BreakerOpen, when the call may go out as the half-open breaker's
// one probe.
const BreakerProbe = "probe"

// Gate is a dependency's breaker's answer to one call.
type Gate struct {
	// State is budget.BreakerClosed, BreakerProbe (this call is the one
	// probe; report it with probe true) or budget.BreakerOpen.
	State string
	// RetryAt, when the breaker is open, is the refused call's own release
	// slot: the breaker's next probe (the end of its probe interval, which
	// grows from the cooldown while the outage lasts, see
	// budget.BreakerConfig.ProbeInterval; or soon after, while another
	// call's probe is in flight), or the slot after
	// the last one handed out, whichever is later; slots are the declared
	// cfg.Release apart, or, where nothing is declared, the interval of the
	// dependency's adaptive release rate (see BreakerPace). A call refused
	// at the gate is parked until then.
	RetryAt time.Time
	// OpenSince, when the breaker is open, is when this outage opened it
	// (failed probes do not move it): the outage, not a long queue of
	// slots, is what escalate.after_breaker_open_seconds measures.
	OpenSince time.Time
	// Failures, when the breaker is closed, is the dependency's current
	// streak of failures with no success between (see migration 00014):
	// while it is not 0, a caller reports its success, which ends the
	// streak.
	Failures int
}

// BreakerGate asks the dependency's breaker whether a call may go out, in
// one statement that reads a closed breaker without a lock, and hands a
// refused call its release slot (see migrations 00012, 00014, 00018, 00020
// and 00032). An open breaker lets its next probe out once the probe
// interval of the outage's failed probes has passed since it last opened.
// The call is one sent again (after a failure or a wait); a call's first
// send asks BreakerGateFirstSend.
func (s *Store) BreakerGate(ctx context.Context, dependency string, cfg budget.BreakerConfig) (Gate, error) {
	return s.breakerGate(ctx, dependency, cfg, false)
}

// BreakerGateFirstSend is BreakerGate for a call's first send. The first
// sends an open breaker refuses are the dependency's fresh demand, which
// goes on once it has closed: from two cooldowns into an outage, the
// release slots are spaced at what that demand leaves of nine tenths of
// the release rate (migration 00032), so that the backlog and the new
// calls together stay within what the dependency takes.
func (s *Store) BreakerGateFirstSend(ctx context.Context, dependency string, cfg budget.BreakerConfig) (Gate, error) {
	return s.breakerGate(ctx, dependency, cfg, true)
}

func (s *Store) breakerGate(ctx context.Context, dependency string, cfg budget.BreakerConfig, firstSend bool) (Gate, error) {
	if err := cfg.Validate(); err != nil {
		return Gate{}, fmt.Errorf("ledger: breaker gate %s: %w", dependency, err)
	}
	a := cfg.AdaptiveRate()
	steady, maxCooldown := cfg.ProbeBackoff()
	var gate Gate
	var retryAt, openSince *time.Time
	if err := s.pool.QueryRow(ctx, `SELECT state, retry_at, open_since, failures FROM agentsaga_breaker_gate($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
		dependency, milliseconds(cfg.Cooldown), milliseconds(cfg.Release), milliseconds(cfg.Window), a.Start, a.Floor, a.Ceiling,
		milliseconds(maxCooldown), steady, firstSend).Scan(
		&gate.State, &retryAt, &openSince, &gate.Failures); err != nil {
		return Gate{}, fmt.Errorf("ledger: breaker gate %s: %w", dependency, err)
	}
	if retryAt != nil {
		gate.RetryAt = *retryAt
	}
	if openSince != nil {
		gate.OpenSince = *openSince
	}
	return gate, nil
}

// BreakerPace books a call released from the open breaker's queue (its
// dependency's breaker has since closed) a place in the dependency's paced
// line, and returns when it may leave: now, or later by the release
// interval of each call booked before it, so that calls a lagging worker
// bunched still reach the dependency spaced (migration 00017).
//
// The interval is the declared cfg.Release, or, where nothing is declared,
// that of the dependency's adaptive release rate (budget.AdaptiveRelease,
// migration 00018). successes is how many released calls the caller saw
// succeed since its last booking for this dependency: while the line is in
// use they raise the rate before this call is booked. A worker holds its
// successes until its next booking, so the ones after its last booking of
// a drain wait for a later drain and count only if calls wait in the line
// then: the rate rises slower than the evidence allows, never faster.
//
// After an outage in which new calls kept coming, the probe that closed
// the breaker started a slow start (migration 00037): the line runs at a
// slow rate of its own, from one release a second, raised by the successes
// (quickly up to the room the new calls leave, by steps past it) and
// halved by a failure, until it catches up with the adaptive rate.
func (s *Store) BreakerPace(ctx context.Context, dependency string, cfg budget.BreakerConfig, successes int) (time.Time, error) {
	if err := cfg.Validate(); err != nil {
		return time.Time{}, fmt.Errorf("ledger: breaker pace %s: %w", dependency, err)
	}
	if successes < 0 {
		return time.Time{}, fmt.Errorf("ledger: breaker pace %s: successes %d must not be negative", dependency, successes)
	}
	a := cfg.AdaptiveRate()
	var at time.Time
	if err := s.pool.QueryRow(ctx, `SELECT agentsaga_breaker_pace($1, $2, $3, $4, $5, $6, $7)`,
		dependency, milliseconds(cfg.Release), successes, a.Start, a.Floor, a.Ceiling, a.Step).Scan(&at); err != nil {
		return time.Time{}, fmt.Errorf("ledger: breaker pace %s: %w", dependency, err)
	}
	return at, nil
}

// ReleaseRate is a dependency's adaptive release rate, in releases a
// second: what it has learned, or cfg's start before it has learned
// anything, within cfg's floor and ceiling. It says nothing of a declared
// rate, which wins wherever one is declared.
func (s *Store) ReleaseRate(ctx context.Context, dependency string, cfg budget.BreakerConfig) (float64, error) {
	if err := cfg.Validate(); err != nil {
		return 0, fmt.Errorf("ledger: release rate %s: %w", dependency, err)
	}
	a := cfg.AdaptiveRate()
	var rate float64
	err := s.pool.QueryRow(ctx, `
		SELECT agentsaga_release_rate((SELECT release_rate FROM circuit_breakers WHERE dependency = $1), $2, $3, $4)`,
		dependency, a.Start, a.Floor, a.Ceiling).Scan(&rate)
	if err != nil {
		return 0, fmt.Errorf("ledger: release rate %s: %w", dependency, err)
	}
	return rate, nil
}

// BreakerReport is what a dependency's breaker says after a call's outcome.
type BreakerReport struct {
	// State is budget.BreakerClosed, BreakerOpen or BreakerHalfOpen.
	State string
	// OpenSince, when the breaker is open, is when this outage opened it:
	// a failed probe does not move it.
	OpenSince time.Time
	// RetryAt, when the breaker is open, is when it lets its next probe
	// out: its last opening plus the probe interval of the outage's failed
	// probes (budget.BreakerConfig.ProbeInterval). A call that failed
	// against it waits until then.
	RetryAt time.Time
}

// BreakerReport reports a call's outcome to the dependency's breaker and
// returns what it says now. While closed, cfg.Threshold failures in a row
// within cfg.Window open it, and a success ends the streak (migration
// 00014). A failure while the dependency's paced line is in use also
// halves its adaptive release rate, once per congestion (migration 00018,
// budget.AdaptiveRelease). A probe's failure, which opens the breaker
// again, counts toward the outage's probe interval; its success closes the
// breaker, and the next outage starts again at the cooldown (migration
// 00020). When new calls kept coming through the outage, that success also
// starts the paced line's slow start, whose first failure halves the slow
// rate and leaves the adaptive one alone (migration 00037).
func (s *Store) BreakerReport(ctx context.Context, dependency string, success, probe bool, cfg budget.BreakerConfig) (BreakerReport, error) {
	if err := cfg.Validate(); err != nil {
		return BreakerReport{}, fmt.Errorf("ledger: breaker record %s: %w", dependency, err)
	}
	a := cfg.AdaptiveRate()
	steady, maxCooldown := cfg.ProbeBackoff()
	var report BreakerReport
	var openSince, retryAt *time.Time
	if err := s.pool.QueryRow(ctx, `SELECT state, open_since, retry_at FROM agentsaga_breaker_report($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
		dependency, success, probe, cfg.Threshold, milliseconds(cfg.Window), a.Start, a.Floor, a.Ceiling, milliseconds(a.Hold),
		milliseconds(cfg.Cooldown), milliseconds(maxCooldown), steady).Scan(&report.State, &openSince, &retryAt); err != nil {
		return BreakerReport{}, fmt.Errorf("ledger: breaker record %s: %w", dependency, err)
	}
	if openSince != nil {
		report.OpenSince = *openSince
	}
	if retryAt != nil {
		report.RetryAt = *retryAt
	}
	return report, nil
}

// RetryCounters is what a run has spent on retries.
type RetryCounters struct {
	Retries     int            `json:"retries"`
	ToolRetries map[string]int `json:"tool_retries"`
}

// RunRetryCounters returns the run's retries, in total and per tool; the
// zero value when it has none.
func (s *Store) RunRetryCounters(ctx context.Context, workflowID string) (RetryCounters, error) {
	var c RetryCounters
	err := s.pool.QueryRow(ctx, `SELECT retries, tool_retries FROM run_retry_counters WHERE workflow_id = $1`,
		workflowID).Scan(&c.Retries, &c.ToolRetries)
	if errors.Is(err, pgx.ErrNoRows) {
		return RetryCounters{}, nil
	}
	if err != nil {
		return RetryCounters{}, fmt.Errorf("ledger: retry counters of %s: %w", workflowID, err)
	}
	return c, nil
}

// openBreakers lists the dependencies whose breaker is open or half-open.
func (s *Store) openBreakers(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT dependency FROM circuit_breakers WHERE state IN ('open', 'half-open') ORDER BY dependency`)
	if err != nil {
		return nil, fmt.Errorf("ledger: open breakers: %w", err)
	}
	deps, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("ledger: open breakers: %w", err)
	}
	return deps, nil
}

// milliseconds is d as the float8 milliseconds the breaker functions take.
func milliseconds(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
