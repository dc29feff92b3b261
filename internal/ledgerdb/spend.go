package ledgerdb

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/internal/wire"
)

// Spend caps (migration 00021, issue 31): USD per account and calendar
// period, reserved before each call and settled to what it cost, so that
// what an account spends and holds in a period never passes its cap,
// however many runs, workers and processes share it.

// A cap's periods: calendar-aligned in the cap's time zone.
const (
	SpendMinute = "minute"
	SpendHour   = "hour"
	SpendDay    = "day"
	SpendMonth  = "month"
)

// maxRollingWindow is the longest rolling window a cap may have.
const maxRollingWindow = 31 * 24 * time.Hour

// RollingPeriod is the period of a cap on what an account spends in any
// window of length d ("rolling 24h", "rolling 90m"), in whole seconds. Its
// spend is kept in buckets of a sixtieth of the window, and a bucket
// counts whole while any of it is in the window: such a cap binds up to a
// sixtieth early, never late.
func RollingPeriod(d time.Duration) string {
	d = d.Truncate(time.Second)
	switch {
	case d%time.Hour == 0:
		return fmt.Sprintf("rolling %dh", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("rolling %dm", d/time.Minute)
	}
	return fmt.Sprintf("rolling %ds", d/time.Second)
}

// SpendCap is an operator's cap on what an account may spend in a period.
type SpendCap struct {
	// Account is a path ("acme/support"): a call charged to it is charged
	// to each of its parents ("acme") too, and must fit their caps.
	Account string `json:"account"`
	// Period is SpendMinute (a burst cap), SpendHour, SpendDay or
	// SpendMonth, calendar-aligned, or a RollingPeriod.
	Period string `json:"period"`
	// TimeZone aligns a calendar period ("Europe/Paris"); empty means
	// UTC. A rolling window ignores it.
	TimeZone string `json:"time_zone,omitempty"`
	// USD is the most the account may spend in one period.
	USD float64 `json:"usd"`
	// OnExhausted is agentsagatype.OnExhaustedFinish (the default),
	// agentsagatype.OnExhaustedWait or agentsagatype.OnExhaustedEscalate.
	OnExhausted string `json:"on_exhausted,omitempty"`
	// FinishReserve is the share of the cap only finishing turns may use
	// (0.1: the last tenth), so that a run the cap stops can still pay for
	// its partial answer and handoff note. 0: none.
	FinishReserve float64 `json:"finish_reserve,omitempty"`
	// Admit is SpendAdmitRun (the default: a run is admitted whole, its
	// estimate reserved, or waits in its account's queue) or
	// SpendAdmitTurn (the cap is shared out turn by turn, and no run
	// waits for it). Empty in a change recorded before it existed.
	Admit string `json:"admit,omitempty"`
}

// How a cap admits work (SpendCap.Admit).
const (
	SpendAdmitRun  = "run"
	SpendAdmitTurn = "turn"
)

// withDefaults fills the time zone and what happens when the cap binds.
func (c SpendCap) withDefaults() SpendCap {
	if c.TimeZone == "" {
		c.TimeZone = "UTC"
	}
	if c.OnExhausted == "" {
		c.OnExhausted = agentsagatype.OnExhaustedFinish
	}
	if c.Admit == "" {
		c.Admit = SpendAdmitRun
	}
	return c
}

// Validate says what is wrong with the cap, naming the field.
func (c SpendCap) Validate() error {
	if err := budget.ValidateAccount(c.Account); err != nil {
		return err
	}
	switch c.Period {
	case SpendMinute, SpendHour, SpendDay, SpendMonth:
	default:
		window, rolling := wire.RollingWindow(c.Period)
		if !rolling {
			return fmt.Errorf("spend cap %s: period %q is not %s, %s, %s, %s or a rolling window (%q)", c.Account, c.Period,
				SpendMinute, SpendHour, SpendDay, SpendMonth, RollingPeriod(24*time.Hour))
		}
		d, err := time.ParseDuration(window)
		if err != nil || d <= 0 || d > maxRollingWindow || RollingPeriod(d) != c.Period {
			return fmt.Errorf("spend cap %s: rolling window %q is not a whole number of hours, minutes or seconds between 1s and %s (%q, %q)",
				c.Account, window, maxRollingWindow, RollingPeriod(24*time.Hour), RollingPeriod(90*time.Minute))
		}
	}
	if c.TimeZone != "" {
		if _, err := time.LoadLocation(c.TimeZone); err != nil {
			return fmt.Errorf("spend cap %s: time zone %q: %w", c.Account, c.TimeZone, err)
		}
	}
	if c.USD < 0 || math.IsNaN(c.USD) || math.IsInf(c.USD, 0) {
		return fmt.Errorf("spend cap %s: usd %v must be a number of dollars, 0 or more", c.Account, c.USD)
	}
	if c.FinishReserve < 0 || c.FinishReserve >= 1 || math.IsNaN(c.FinishReserve) {
		return fmt.Errorf("spend cap %s: finish_reserve %v is not a share of the cap in [0, 1)", c.Account, c.FinishReserve)
	}
	switch c.OnExhausted {
	case "", agentsagatype.OnExhaustedFinish, agentsagatype.OnExhaustedWait, agentsagatype.OnExhaustedEscalate:
	default:
		return fmt.Errorf("spend cap %s: on_exhausted %q is not %s, %s or %s", c.Account, c.OnExhausted,
			agentsagatype.OnExhaustedFinish, agentsagatype.OnExhaustedWait, agentsagatype.OnExhaustedEscalate)
	}
	switch c.Admit {
	case "", SpendAdmitRun, SpendAdmitTurn:
	default:
		return fmt.Errorf("spend cap %s: admit %q is not %s (whole runs, queued when they do not fit) or %s (turn by turn)",
			c.Account, c.Admit, SpendAdmitRun, SpendAdmitTurn)
	}
	return nil
}

// SetSpendCap sets an account's cap for a period, replacing the one it
// had, and records who changed it, when, from what and to what. It
// returns the cap as it was (nil when there was none).
func (s *Store) SetSpendCap(ctx context.Context, c SpendCap, by string) (*SpendCap, error) {
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("ledger: set spend cap: %w", err)
	}
	if by == "" {
		return nil, fmt.Errorf("ledger: set spend cap %s: who sets it is empty", c.Account)
	}
	c = c.withDefaults()
	return s.changeSpendCap(ctx, c.Account, c.Period, c.TimeZone, &c.USD, c.OnExhausted, c.FinishReserve, c.Admit, by)
}

// RemoveSpendCap removes an account's cap for a period, recording who did
// it; it returns the cap removed (nil when there was none).
func (s *Store) RemoveSpendCap(ctx context.Context, account, period, by string) (*SpendCap, error) {
	if by == "" {
		return nil, fmt.Errorf("ledger: remove spend cap %s: who removes it is empty", account)
	}
	return s.changeSpendCap(ctx, account, period, "UTC", nil, agentsagatype.OnExhaustedFinish, 0, SpendAdmitRun, by)
}

func (s *Store) changeSpendCap(ctx context.Context, account, period, timeZone string, usd *float64, onExhausted string,
	finishReserve float64, admit, by string) (*SpendCap, error) {
	var old []byte
	if err := s.pool.QueryRow(ctx, `SELECT agentsaga_spend_set_cap($1, $2, $3, $4, $5, $6, $7, $8)`,
		account, period, timeZone, usd, onExhausted, finishReserve, admit, by).Scan(&old); err != nil {
		return nil, fmt.Errorf("ledger: change spend cap %s per %s: %w", account, period, err)
	}
	if old == nil {
		return nil, nil
	}
	was := SpendCap{Account: account, Period: period}
	if err := json.Unmarshal(old, &was); err != nil {
		return nil, fmt.Errorf("ledger: change spend cap %s per %s: read the old cap: %w", account, period, err)
	}
	return &was, nil
}

// SpendCapState is a cap with its current period: what is spent in it
// and reserved, and when it resets. For a rolling cap, Starts is where its
// window begins now and Resets when room next frees, as its oldest spend
// leaves the window.
type SpendCapState struct {
	SpendCap
	UpdatedBy       string
	UpdatedAt       time.Time
	Starts, Resets  time.Time
	Spent, Reserved float64
	// Waiting is how many unfinished runs wait for the account's caps, or
	// are escalated on them, as the runs' statuses say.
	Waiting int
	// Queued is how many runs of the account and the accounts under it
	// wait in the admission queue (not admitted yet), whatever holds
	// them there: this cap, another, or a max_concurrent_runs.
	Queued int
	// Refusals is how many calls the cap has refused since it was set.
	Refusals int64
}

// Left is what the period has room for, its finishing reserve included.
func (c SpendCapState) Left() float64 { return max(c.USD-c.Spent-c.Reserved, 0) }

// SpendCaps lists the caps of account and every account under it (all
// caps when account is empty), each with its current period.
func (s *Store) SpendCaps(ctx context.Context, account string) ([]SpendCapState, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT c.account, c.period, c.time_zone, c.usd::float8, c.on_exhausted, c.finish_reserve::float8, c.admit, c.updated_by, c.updated_at,
		       coalesce(clock_timestamp() - agentsaga_spend_window(c.period), w.starts), h.frees, h.spent::float8, h.reserved::float8,
		       (SELECT count(*) FROM runs r WHERE r.finished_at IS NULL AND r.status IN ('running', 'escalated')
		          AND (strpos(r.status_detail, 'spend cap of account ' || c.account || ' ') > 0
		               OR strpos(r.status_detail, 'spend cap of account ' || c.account || ':') > 0))::int,
		       (SELECT count(*) FROM run_admissions q WHERE q.status = 'queued'
		          AND (q.account = c.account OR starts_with(q.account, c.account || '/')))::int,
		       coalesce((SELECT f.refusals FROM spend_refusals f WHERE f.account = c.account AND f.period = c.period), 0)
		FROM spend_caps c
		CROSS JOIN LATERAL agentsaga_spend_period(c.period, c.time_zone, clock_timestamp()) w
		CROSS JOIN LATERAL agentsaga_spend_held(c.account, c.period, c.time_zone, clock_timestamp()) h
		WHERE $1 = '' OR c.account = $1 OR c.account LIKE replace(replace($1, '%', '\%'), '_', '\_') || '/%'
		ORDER BY c.account, c.period`, account)
	if err != nil {
		return nil, fmt.Errorf("ledger: spend caps %s: %w", account, err)
	}
	caps, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (SpendCapState, error) {
		var c SpendCapState
		err := row.Scan(&c.Account, &c.Period, &c.TimeZone, &c.USD, &c.OnExhausted, &c.FinishReserve, &c.Admit, &c.UpdatedBy, &c.UpdatedAt,
			&c.Starts, &c.Resets, &c.Spent, &c.Reserved, &c.Waiting, &c.Queued, &c.Refusals)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("ledger: spend caps %s: %w", account, err)
	}
	return caps, nil
}

// SpendCapChange is one change to a cap: Old or New is nil when the cap
// was created or removed.
type SpendCapChange struct {
	Account, Period string
	Old, New        *SpendCap
	By              string
	At              time.Time
}

// SpendCapChanges lists the changes to account's caps, oldest first.
func (s *Store) SpendCapChanges(ctx context.Context, account string) ([]SpendCapChange, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT account, period, old, new, changed_by, changed_at FROM spend_cap_changes
		WHERE account = $1 ORDER BY id`, account)
	if err != nil {
		return nil, fmt.Errorf("ledger: spend cap changes %s: %w", account, err)
	}
	changes, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (SpendCapChange, error) {
		var c SpendCapChange
		var old, new []byte
		if err := row.Scan(&c.Account, &c.Period, &old, &new, &c.By, &c.At); err != nil {
			return c, err
		}
		for _, side := range []struct {
			raw []byte
			cap **SpendCap
		}{{old, &c.Old}, {new, &c.New}} {
			if side.raw == nil {
				continue
			}
			cap := SpendCap{Account: c.Account, Period: c.Period}
			if err := json.Unmarshal(side.raw, &cap); err != nil {
				return c, err
			}
			*side.cap = &cap
		}
		return c, nil
	})
	if err != nil {
		return nil, fmt.Errorf("ledger: spend cap changes %s: %w", account, err)
	}
	return changes, nil
}

// SpendReservation is how a call's reservation went: refused by Cap,
// which had Spent and Reserved of its USD and resets at Resets; or
// admitted, when Cap (if the account has caps: Cap.Period set) is the cap
// with the least room left, with the call's part in Reserved. Room is
// what the call could use of the cap: all of it for a finishing turn,
// less its finishing reserve otherwise.
type SpendReservation struct {
	Admitted        bool
	Cap             SpendCap
	Spent, Reserved float64
	Room            float64
	Resets          time.Time
}

// Left is the room the cap has for calls like this one.
func (r SpendReservation) Left() float64 { return max(r.Room-r.Spent-r.Reserved, 0) }

// Refusal is a refused reservation of needed USD, as a run reads it.
func (r SpendReservation) Refusal(needed float64) wire.SpendRefusal {
	return wire.SpendRefusal{Account: r.Cap.Account, Period: r.Cap.Period, USD: r.Cap.USD, Room: r.Room, Spent: r.Spent,
		Reserved: r.Reserved, Resets: r.Resets, OnExhausted: r.Cap.OnExhausted, Needed: needed}
}

// ReserveSpend reserves usd for the call key against every cap of account
// and its parents (up to each cap's room: a call that is not a finishing
// turn leaves the finishing reserve alone), or refuses it naming the
// first cap that binds (the outermost account first). The hold lasts until SettleSpend, or until
// lease passes (ExpireSpendHolds then ends it). A key that holds already
// is admitted again without holding twice.
func (s *Store) ReserveSpend(ctx context.Context, key, account string, usd float64, lease time.Duration) (SpendReservation, error) {
	if err := budget.ValidateAccount(account); err != nil {
		return SpendReservation{}, fmt.Errorf("ledger: reserve spend %s: %w", key, err)
	}
	if usd < 0 || math.IsNaN(usd) || math.IsInf(usd, 0) {
		return SpendReservation{}, fmt.Errorf("ledger: reserve spend %s: usd %v must be 0 or more", key, usd)
	}
	if lease <= 0 {
		return SpendReservation{}, fmt.Errorf("ledger: reserve spend %s: lease %v must be positive", key, lease)
	}
	var r SpendReservation
	var capUSD, spent, reserved, room *float64
	var resets *time.Time
	if err := s.pool.QueryRow(ctx, `
		SELECT admitted, account, period, cap::float8, spent::float8, reserved::float8, resets, on_exhausted, room::float8
		FROM agentsaga_spend_reserve($1, $2, $3, $4, false)`, key, account, usd, lease.Milliseconds()).
		Scan(&r.Admitted, &r.Cap.Account, &r.Cap.Period, &capUSD, &spent, &reserved, &resets, &r.Cap.OnExhausted, &room); err != nil {
		return SpendReservation{}, fmt.Errorf("ledger: reserve spend %s on %s: %w", key, account, err)
	}
	if capUSD != nil { // refused: the cap that binds; admitted: the one with the least room left
		r.Cap.USD, r.Spent, r.Reserved, r.Resets, r.Room = *capUSD, *spent, *reserved, *resets, *room
	}
	if !r.Admitted {
		s.countSpendRefusal(ctx, r.Cap)
	}
	return r, nil
}

// countSpendRefusal counts a call the cap refused. A count that cannot be
// written is logged, not returned: the refusal stands either way.
func (s *Store) countSpendRefusal(ctx context.Context, c SpendCap) {
	if _, err := s.pool.Exec(ctx, `
		INSERT INTO spend_refusals AS r (account, period, refusals, last_at) VALUES ($1, $2, 1, clock_timestamp())
		ON CONFLICT (account, period) DO UPDATE SET refusals = r.refusals + 1, last_at = excluded.last_at`, c.Account, c.Period); err != nil {
		slog.Default().Warn("ledger: a spend cap's refusal was not counted", "account", c.Account, "period", c.Period, "error", err)
	}
}

// SettleSpend settles the call key to what it cost (usd; 0 releases it):
// its reservation is given back and the cost spent, in the periods it was
// reserved in. It says whether the key held anything (a key settled twice,
// or never reserved, holds nothing the second time).
func (s *Store) SettleSpend(ctx context.Context, key string, usd float64) (bool, error) {
	if usd < 0 || math.IsNaN(usd) || math.IsInf(usd, 0) {
		return false, fmt.Errorf("ledger: settle spend %s: usd %v must be 0 or more", key, usd)
	}
	var held *float64
	if err := s.pool.QueryRow(ctx, `SELECT agentsaga_spend_settle($1, $2)::float8`, key, usd).Scan(&held); err != nil {
		return false, fmt.Errorf("ledger: settle spend %s: %w", key, err)
	}
	return held != nil, nil
}

// ExpireSpendHolds ends the holds whose lease has passed: a hold whose
// call reached the ledger is spent in full (the provider may have charged
// it, and the reservation bounds what it could cost), one whose call never
// did is released. It returns how many of each.
func (s *Store) ExpireSpendHolds(ctx context.Context) (spentInFull, released int, err error) {
	if err := s.pool.QueryRow(ctx, `SELECT spent_in_full, released FROM agentsaga_spend_expire()`).Scan(&spentInFull, &released); err != nil {
		return 0, 0, fmt.Errorf("ledger: expire spend holds: %w", err)
	}
	return spentInFull, released, nil
}

// SpendClaim is what a model turn charged to an account reserves in its
// claim (TurnRead.Spend): its prompt's tokens, as the conversation's
// estimates count them, at the input price, plus OutputTokens (its
// max_tokens) at the output price; prices in USD per million tokens.
type SpendClaim struct {
	Account                                 string
	InputUSDPerMillion, OutputUSDPerMillion float64
	OutputTokens                            int64
	// Finishing marks a graceful-finish turn, which may use the caps'
	// finishing reserve.
	Finishing bool
}

// ErrSpendCap is a turn's claim refused by a spend cap (in a
// *SpendCapError).
var ErrSpendCap = errors.New("a spend cap has no room for the call")

// SpendCapError is a turn its account's caps cannot pay for: USD is what
// it would have reserved, and Reservation the cap that binds.
type SpendCapError struct {
	Reservation SpendReservation
	USD         float64
}

func (e *SpendCapError) Error() string { return e.Reservation.Refusal(e.USD).Reason() }

func (e *SpendCapError) Is(target error) bool { return target == ErrSpendCap }

// spendRefusal is the spend_* columns of a claim a cap refused.
type spendRefusal struct {
	account, period, onExhausted *string
	cap, spent, reserved, room   *float64
	resets                       *time.Time
}

func (r spendRefusal) reservation() SpendReservation {
	var out SpendReservation
	if r.account != nil {
		out.Cap.Account = *r.account
	}
	if r.period != nil {
		out.Cap.Period = *r.period
	}
	if r.onExhausted != nil {
		out.Cap.OnExhausted = *r.onExhausted
	}
	if r.cap != nil {
		out.Cap.USD = *r.cap
	}
	if r.spent != nil {
		out.Spent = *r.spent
	}
	if r.reserved != nil {
		out.Reserved = *r.reserved
	}
	if r.resets != nil {
		out.Resets = *r.resets
	}
	if r.room != nil {
		out.Room = *r.room
	}
	return out
}

// SpendPeriodState is what one period of a cap spent and holds.
type SpendPeriodState struct {
	Account, Period string
	Starts, Resets  time.Time
	Spent, Reserved float64
}

// SpendPeriods lists every period of account's caps that began at or
// after since, oldest first: what each spent and still holds.
func (s *Store) SpendPeriods(ctx context.Context, account string, since time.Time) ([]SpendPeriodState, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT account, period, starts, resets, spent::float8, reserved::float8 FROM spend_periods
		WHERE account = $1 AND starts >= $2 ORDER BY starts, period`, account, since)
	if err != nil {
		return nil, fmt.Errorf("ledger: spend periods %s: %w", account, err)
	}
	periods, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (SpendPeriodState, error) {
		var p SpendPeriodState
		err := row.Scan(&p.Account, &p.Period, &p.Starts, &p.Resets, &p.Spent, &p.Reserved)
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("ledger: spend periods %s: %w", account, err)
	}
	return periods, nil
}

// SpendLine is one line of the spend report: what the calls of Account on
// Model settled on Day (UTC), in USD, and how many there were. A report
// grouped by fewer dimensions leaves the others empty.
type SpendLine struct {
	Account string    `json:"account,omitempty"`
	Model   string    `json:"model,omitempty"`
	Day     time.Time `json:"day,omitzero"`
	USD     float64   `json:"usd"`
	Calls   int64     `json:"calls"`
	// The model turns' input tokens, and the parts of them the provider
	// read from its prompt cache and wrote to it.
	InputTokens      int64 `json:"input_tokens"`
	CachedTokens     int64 `json:"cached_input_tokens"`
	CacheWriteTokens int64 `json:"cache_write_tokens"`
}

// The dimensions a spend report groups by.
const (
	SpendByAccount = "account"
	SpendByModel   = "model"
	SpendByDay     = "day"
)

// SpendReport attributes what the calls charged to accounts settled since
// since, grouped by the dimensions in by (SpendByAccount, SpendByModel,
// SpendByDay; none: one line), the largest first.
func (s *Store) SpendReport(ctx context.Context, since time.Time, by []string) ([]SpendLine, error) {
	group := map[string]bool{}
	for _, d := range by {
		switch d {
		case SpendByAccount, SpendByModel, SpendByDay:
			group[d] = true
		default:
			return nil, fmt.Errorf("ledger: spend report: %q is not %s, %s or %s", d, SpendByAccount, SpendByModel, SpendByDay)
		}
	}
	rows, err := s.pool.Query(ctx, `
		SELECT e.account, coalesce(a.tool, ''), date_trunc('day', e.settled_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC',
		       sum(e.usd)::float8, count(*),
		       coalesce(sum(substring(u.result from '"input_tokens":(\d+)')::bigint), 0)::bigint,
		       coalesce(sum(substring(u.result from '"cached_input_tokens":(\d+)')::bigint), 0)::bigint,
		       coalesce(sum(substring(u.result from '"cache_write_tokens":(\d+)')::bigint), 0)::bigint
		FROM spend_entries e LEFT JOIN actions a ON a.idempotency_key = e.idempotency_key
		-- A completed model turn's result is its reply, whose usage the
		-- counts are read from, as text: a reply's own text holds its
		-- quotes escaped, so only the usage's keys match, and no result
		-- can make the report fail. A tool's result is not read.
		LEFT JOIN LATERAL (SELECT CASE WHEN a.tool LIKE 'model:%' AND a.status = 'completed' THEN a.result END AS result) u ON true
		WHERE e.settled_at >= $1
		GROUP BY 1, 2, 3`, since)
	if err != nil {
		return nil, fmt.Errorf("ledger: spend report: %w", err)
	}
	lines, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (SpendLine, error) {
		var l SpendLine
		err := row.Scan(&l.Account, &l.Model, &l.Day, &l.USD, &l.Calls, &l.InputTokens, &l.CachedTokens, &l.CacheWriteTokens)
		l.Model = strings.TrimPrefix(l.Model, "model:") // a model turn's action is "model:<provider:name>"
		return l, err
	})
	if err != nil {
		return nil, fmt.Errorf("ledger: spend report: %w", err)
	}
	merged := map[SpendLine]*SpendLine{}
	var out []*SpendLine
	for _, l := range lines {
		k := SpendLine{}
		if group[SpendByAccount] {
			k.Account = l.Account
		}
		if group[SpendByModel] {
			k.Model = l.Model
		}
		if group[SpendByDay] {
			k.Day = l.Day
		}
		m, ok := merged[k]
		if !ok {
			line := k
			m = &line
			merged[k] = m
			out = append(out, m)
		}
		m.USD += l.USD
		m.Calls += l.Calls
		m.InputTokens += l.InputTokens
		m.CachedTokens += l.CachedTokens
		m.CacheWriteTokens += l.CacheWriteTokens
	}
	report := make([]SpendLine, len(out))
	for i, m := range out {
		report[i] = *m
	}
	slices.SortStableFunc(report, func(a, b SpendLine) int { return cmp.Compare(b.USD, a.USD) })
	return report, nil
}
