package webhooks

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	mathrand "math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentsaga/agentsaga/internal/dataset"
	"github.com/agentsaga/agentsaga/internal/textclip"
)

// Channel is the Postgres channel the outbox notifies when it holds a new
// delivery (or one is enabled or redelivered by hand).
const Channel = "agentsaga_webhooks"

// Schedule is when a failed delivery is tried again: after attempt n
// fails, it waits a random time in [0, min(Cap, Base*2^(n-1))) (full
// jitter), where n is the least of the delivery's attempts and one more
// than its endpoint's failures in a row, and it is given up (dead) at the
// first failure Window after its first attempt was due.
type Schedule struct {
	Base, Cap, Window time.Duration
}

// DefaultSchedule tries a delivery again within 1 s, 2 s, 4 s, ... up to
// an hour (the 13th retry on), for 72 hours: about 150 attempts, as Stripe
// retries for three days.
var DefaultSchedule = Schedule{Base: time.Second, Cap: time.Hour, Window: 72 * time.Hour}

// ceiling is the most the wait after attempt n can be.
func (s Schedule) ceiling(n int) time.Duration {
	if n < 1 {
		n = 1
	}
	c := float64(s.Base) * math.Pow(2, float64(n-1))
	if c > float64(s.Cap) {
		return s.Cap
	}
	return time.Duration(c)
}

// Delay is the wait after attempt n failed, for a random r in [0, 1).
func (s Schedule) Delay(n int, r float64) time.Duration {
	return time.Duration(r * float64(s.ceiling(n)))
}

// Timeout is how long a receiver has to answer: a 2xx later than this is
// a failure, and the delivery is sent again.
const Timeout = 10 * time.Second

// Options configure a Deliverer; the zero value is the production one.
type Options struct {
	// Owner names this process in leases and attempts (host/pid when "").
	Owner string
	// Concurrency is how many deliveries it sends at once (64 when 0); it
	// holds no more than that many in memory.
	Concurrency int
	// Lease is how long a claim lasts: a process killed mid-send leaves
	// its deliveries to be sent again this long after it claimed them
	// (60 s when 0; more than Timeout).
	Lease time.Duration
	// Sweep is how often it looks for deliveries due without being told
	// (1 s when 0): retries, and wake-ups a lost LISTEN missed.
	Sweep time.Duration
	// Schedule is DefaultSchedule when zero.
	Schedule Schedule
	// PublicURL is where `agentsaga serve` is reached, for the links to a
	// run (AGENTSAGA_PUBLIC_URL); "" gives paths.
	PublicURL string
	// Clock is the time leases, retries and the retry window are reckoned
	// in (time.Now when nil); the webhook-timestamp is always the wall
	// clock's, which receivers check.
	Clock func() time.Time
	// Resolver and Dialer are the guard's (the system's when nil): tests
	// give stubs, so that nothing is sent to any address but loopback.
	Resolver Resolver
	Dialer   Dialer
	// Logger hears deliveries given up, endpoints disabled and failures of
	// the loop's own; nil is slog.Default().
	Logger *slog.Logger
}

// Deliverer sends the outbox's deliveries. Any number of processes may
// run one on the same database.
type Deliverer struct {
	pool    *pgxpool.Pool
	opts    Options
	guarded *http.Client // endpoints that do not allow private targets
	private *http.Client
	redact  sync.Map // endpoint redaction paths, parsed
}

// NewDeliverer returns a deliverer of pool's outbox.
func NewDeliverer(pool *pgxpool.Pool, opts Options) *Deliverer {
	if opts.Owner == "" {
		host, _ := os.Hostname()
		opts.Owner = host + "/" + strconv.Itoa(os.Getpid())
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = 64
	}
	if opts.Lease <= 0 {
		opts.Lease = time.Minute
	}
	if opts.Sweep <= 0 {
		opts.Sweep = time.Second
	}
	if opts.Schedule == (Schedule{}) {
		opts.Schedule = DefaultSchedule
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	d := &Deliverer{pool: pool, opts: opts}
	d.guarded = d.client(false)
	d.private = d.client(true)
	return d
}

// client is an HTTP client whose connections the guard makes; it follows
// no redirect and uses no proxy (a proxy would reach what the guard
// refuses).
func (d *Deliverer) client(allowPrivate bool) *http.Client {
	g := NewGuard(allowPrivate)
	if d.opts.Resolver != nil {
		g.Resolver = d.opts.Resolver
	}
	if d.opts.Dialer != nil {
		g.Dialer = d.opts.Dialer
	}
	return &http.Client{
		Transport: &http.Transport{
			Proxy:                 nil,
			DialContext:           g.DialContext,
			ForceAttemptHTTP2:     true,
			MaxIdleConns:          4 * d.opts.Concurrency,
			MaxIdleConnsPerHost:   d.opts.Concurrency,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   Timeout,
			ResponseHeaderTimeout: Timeout,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// claim is a delivery this process holds the lease of.
type claim struct {
	id, endpoint, run, event, token string
	seq                             int64
	payload                         []byte
	attempt                         int
	retryFrom                       time.Time
	url, format, secret             string
	streak                          int // the endpoint's failures in a row when claimed
	previous                        *string
	previousUntil                   *time.Time
	allowPrivate                    bool
	redact                          []string
}

// noWait makes the statement's commit not wait for its WAL to reach the
// disk (synchronous_commit off, for this transaction only). A claim or a
// settle that a crash of Postgres loses costs a second send of the same
// message, which at-least-once delivery allows; what the outbox holds to
// be sent is written by the statement that stores the event, as durably
// as the event.
const noWait = `(SELECT set_config('synchronous_commit', 'off', true) AS off) nowait`

// claimSQL claims up to $2 due deliveries, each the first undelivered of
// its run to its endpoint, under a lease ($3 owner, $4 token, until $5),
// ends the attempts a dead process left open, and starts the new ones.
// The due and lease conditions are on the claimed row itself, so a row
// another claim changed meanwhile is checked again as it now is.
const claimSQL = `
WITH candidates AS MATERIALIZED (
	SELECT h.id FROM (
		SELECT DISTINCT ON (endpoint_id, workflow_id) id, endpoint_id, next_attempt_at, lease_until, created_at
		FROM webhook_deliveries WHERE status IN ('pending', 'failed')
		ORDER BY endpoint_id, workflow_id, event_seq
	) h
	WHERE h.next_attempt_at <= $1 AND (h.lease_until IS NULL OR h.lease_until <= $1)
	  AND EXISTS (SELECT 1 FROM webhook_endpoints e WHERE e.id = h.endpoint_id AND e.disabled_at IS NULL)
	ORDER BY h.next_attempt_at, h.created_at
	LIMIT 4 * $2
), due AS (
	SELECT d.id FROM webhook_deliveries d
	WHERE d.id = ANY (ARRAY(SELECT id FROM candidates))
	  AND d.status IN ('pending', 'failed') AND d.next_attempt_at <= $1
	  AND (d.lease_until IS NULL OR d.lease_until <= $1)
	ORDER BY d.next_attempt_at, d.created_at
	LIMIT $2
	FOR UPDATE SKIP LOCKED
), claimed AS (
	UPDATE webhook_deliveries d SET attempts = d.attempts + 1, lease_owner = $3, lease_token = $4, lease_until = $5
	FROM due WHERE d.id = due.id
	RETURNING d.id, d.endpoint_id, d.workflow_id, d.event_seq, d.event, d.payload, d.attempts, d.retry_from
), ended AS (
	UPDATE webhook_attempts a SET ended_at = $1,
		error = 'abandoned: ' || a.owner || ' held the lease and never said how the attempt ended (it stopped or was killed mid-send)'
	FROM claimed c WHERE a.delivery_id = c.id AND a.ended_at IS NULL
), started AS (
	INSERT INTO webhook_attempts (delivery_id, attempt, owner, started_at) SELECT id, attempts, $3, $1 FROM claimed
)
SELECT c.id, c.endpoint_id, c.workflow_id, c.event_seq, c.event, c.payload, c.attempts, c.retry_from,
	e.url, e.format, e.secret, e.previous_secret, e.previous_until, e.allow_private, e.redact, e.failure_streak
FROM claimed c JOIN webhook_endpoints e ON e.id = c.endpoint_id, ` + noWait

// claim takes up to n due deliveries.
func (d *Deliverer) claim(ctx context.Context, n int) ([]*claim, error) {
	now := d.opts.Clock()
	tok := make([]byte, 8)
	_, _ = rand.Read(tok)
	token := hex.EncodeToString(tok)
	rows, err := d.pool.Query(ctx, claimSQL, now, n, d.opts.Owner, token, now.Add(d.opts.Lease))
	if err != nil {
		return nil, fmt.Errorf("webhooks: claim: %w", err)
	}
	defer rows.Close()
	var out []*claim
	for rows.Next() {
		c := &claim{token: token}
		if err := rows.Scan(&c.id, &c.endpoint, &c.run, &c.seq, &c.event, &c.payload, &c.attempt, &c.retryFrom,
			&c.url, &c.format, &c.secret, &c.previous, &c.previousUntil, &c.allowPrivate, &c.redact, &c.streak); err != nil {
			return nil, fmt.Errorf("webhooks: claim: %w", err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("webhooks: claim: %w", err)
	}
	return out, nil
}

// outcome is how an attempt ended.
type outcome struct {
	code     int // the receiver's status; 0 when it gave none
	err      string
	duration time.Duration
}

// send makes one attempt of c.
func (d *Deliverer) send(ctx context.Context, c *claim) outcome {
	start := time.Now()
	paths, _ := dataset.ParsePaths(c.redact) // checked when the endpoint was made
	body, err := render(c.payload, c.format, paths, d.opts.PublicURL)
	if err != nil {
		return outcome{err: err.Error()}
	}
	secrets := []string{c.secret}
	if c.previous != nil && c.previousUntil != nil && c.previousUntil.After(d.opts.Clock()) {
		secrets = append(secrets, *c.previous)
	}
	ts := time.Now().Unix()
	sig, err := Sign(c.id, ts, body, secrets...)
	if err != nil {
		return outcome{err: err.Error()}
	}
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, strings.NewReader(string(body)))
	if err != nil {
		return outcome{err: err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "agentsaga-webhooks/1")
	req.Header.Set("webhook-id", c.id)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	req.Header.Set("webhook-signature", sig)
	client := d.guarded
	if c.allowPrivate {
		client = d.private
	}
	resp, err := client.Do(req)
	if err != nil {
		return outcome{err: textclip.Clip(err.Error(), 500), duration: time.Since(start)}
	}
	defer resp.Body.Close()
	o := outcome{code: resp.StatusCode}
	head, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // so that the connection is kept
	o.duration = time.Since(start)
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		o.err = textclip.Clip(strings.TrimSpace(fmt.Sprintf("HTTP %d: %s", resp.StatusCode, textclip.Clean(string(head)))), 300)
		if resp.StatusCode >= 300 && resp.StatusCode < 400 {
			o.err += " (redirects are not followed)"
		}
	}
	return o
}

const settleSQL = `
WITH d AS (
	UPDATE webhook_deliveries SET status = $3, next_attempt_at = $4, last_status = $5, last_error = $6,
		delivered_at = CASE WHEN $3 = 'delivered' THEN $7 ELSE delivered_at END,
		lease_owner = NULL, lease_token = NULL, lease_until = NULL
	WHERE id = $1 AND lease_token = $2 RETURNING endpoint_id
), a AS (
	UPDATE webhook_attempts SET ended_at = $7, status_code = $5, duration_ms = $8, error = $6
	WHERE delivery_id = $1 AND attempt = $9
), endpoint AS (
	UPDATE webhook_endpoints SET failure_streak = CASE WHEN $3 = 'delivered' THEN 0 ELSE failure_streak + 1 END,
		disabled_at = CASE WHEN $10 <> '' AND disabled_at IS NULL THEN $7 ELSE disabled_at END,
		disabled_reason = CASE WHEN $10 <> '' AND disabled_at IS NULL THEN $10 ELSE disabled_reason END
	WHERE id IN (SELECT endpoint_id FROM d) AND ($3 <> 'delivered' OR failure_streak > 0 OR $10 <> '')
	RETURNING failure_streak
), recovered AS (
	-- A receiver back after an outage gets its waiting retries now, not at
	-- the end of their backoff ($11: it had failed recoverAfter in a row).
	UPDATE webhook_deliveries SET next_attempt_at = $7
	WHERE $3 = 'delivered' AND $11 AND id <> $1 AND status = 'failed' AND next_attempt_at > $7
	  AND endpoint_id IN (SELECT endpoint_id FROM d)
)
SELECT count(d.*) FROM d RIGHT JOIN ` + noWait + ` ON true`

// recoverAfter is the failures in a row after which an endpoint's first
// 2xx makes its waiting retries due at once: an outage, not a receiver
// that fails now and then (whose retries are soon anyway).
const recoverAfter = 8

// settle records how c's attempt ended and what becomes of c.
func (d *Deliverer) settle(ctx context.Context, c *claim, o outcome) error {
	now := d.opts.Clock()
	status, next, disable := StatusFailed, now, ""
	switch {
	case o.code >= 200 && o.code <= 299:
		status = StatusDelivered
	case o.code == http.StatusGone:
		status = StatusDead
		disable = fmt.Sprintf("the receiver answered 410 Gone to delivery %s at %s", c.id, now.UTC().Format(time.RFC3339))
	case !now.Before(c.retryFrom.Add(d.opts.Schedule.Window)):
		status = StatusDead
	default:
		// Back off by the endpoint's failures in a row as well as the
		// delivery's: under a receiver that fails some requests at random,
		// each delivery's own count would grow its wait without bound, and
		// hold back every later event of its run behind it.
		next = now.Add(d.opts.Schedule.Delay(min(c.attempt, c.streak+1), mathrand.Float64()))
	}
	var code *int
	if o.code != 0 {
		code = &o.code
	}
	var n int
	err := d.pool.QueryRow(ctx, settleSQL, c.id, c.token, status, next, code, o.err, now,
		float64(o.duration.Microseconds())/1000, c.attempt, disable, c.streak >= recoverAfter).Scan(&n)
	if err != nil {
		return fmt.Errorf("webhooks: settle %s: %w", c.id, err)
	}
	switch {
	case n == 0:
		d.opts.Logger.Warn("webhooks: a delivery's lease passed before its attempt ended; another attempt has it",
			"delivery", c.id, "attempt", c.attempt)
	case disable != "":
		d.opts.Logger.Warn("webhooks: endpoint disabled: its receiver answered 410 Gone", "endpoint", c.endpoint, "url", c.url)
	case status == StatusDead:
		d.opts.Logger.Warn("webhooks: delivery given up: its retry window passed", "delivery", c.id, "endpoint", c.endpoint,
			"attempts", c.attempt, "window", d.opts.Schedule.Window.String(), "error", o.err)
	case status == StatusFailed:
		d.opts.Logger.Debug("webhooks: attempt failed", "delivery", c.id, "attempt", c.attempt, "next", next, "error", o.err)
	}
	return nil
}

// deliver sends c and settles it, on a context of its own: a stopping
// process lets the attempts in flight end (Timeout at most) and says how.
func (d *Deliverer) deliver(ctx context.Context, c *claim) {
	ctx = context.WithoutCancel(ctx)
	o := d.send(ctx, c)
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := d.settle(sctx, c, o); err != nil {
		d.opts.Logger.Warn("webhooks: could not record an attempt; its lease passes and it is sent again", "delivery", c.id, "error", err)
	}
}

// Pass claims up to Concurrency due deliveries, sends them at once and
// settles them; it returns how many it claimed. Run calls it in a loop;
// tests call it to step the outbox on a clock of their own.
func (d *Deliverer) Pass(ctx context.Context) (int, error) {
	claims, err := d.claim(ctx, d.opts.Concurrency)
	if err != nil {
		return 0, err
	}
	var wg sync.WaitGroup
	for _, c := range claims {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.deliver(ctx, c)
		}()
	}
	wg.Wait()
	return len(claims), nil
}

// pruneEvery and keepSettled: settled deliveries (delivered or dead) and
// their attempts are kept 30 days, then deleted in batches by whichever
// process's loop comes to it.
const (
	pruneEvery  = time.Hour
	keepSettled = 30 * 24 * time.Hour
)

// Run delivers until ctx ends, then lets the attempts in flight end. It
// claims whenever it has room, woken by the outbox's notifications, by an
// attempt ending (the next of the run may go), and by a sweep every
// Options.Sweep, which finds the retries that came due.
func (d *Deliverer) Run(ctx context.Context) error {
	wake := make(chan struct{}, 1)
	listenDone := make(chan struct{})
	go func() {
		defer close(listenDone)
		d.listen(ctx, wake)
	}()
	done := make(chan struct{}, d.opts.Concurrency)
	var wg sync.WaitGroup
	defer func() {
		wg.Wait()
		<-listenDone
	}()
	sweep := time.NewTicker(d.opts.Sweep)
	defer sweep.Stop()
	lastPrune := time.Time{}
	inflight := 0
	for {
		if time.Since(lastPrune) > pruneEvery {
			lastPrune = time.Now()
			d.prune(ctx)
		}
		full := false
		// Claim in batches: the claim reads every run's first undelivered
		// delivery, so one claim per attempt ended would cost more than the
		// sends under a backlog. With few in flight (a quiet outbox, or a
		// run whose next event waits on its previous) it claims at once.
		if free := d.opts.Concurrency - inflight; (free >= d.claimBatch() || inflight == 0) && ctx.Err() == nil {
			claims, err := d.claim(ctx, free)
			if err != nil && ctx.Err() == nil {
				d.opts.Logger.Warn("webhooks: claim failed; the sweep tries again", "error", err)
			}
			for _, c := range claims {
				inflight++
				wg.Add(1)
				go func() {
					defer wg.Done()
					d.deliver(ctx, c)
					done <- struct{}{}
				}()
			}
			full = len(claims) == free
		}
		if full || d.opts.Concurrency-inflight < d.claimBatch() {
			// More may be due: claim again as soon as attempts end.
			select {
			case <-ctx.Done():
				return nil
			case <-done:
				inflight--
			}
		} else {
			select {
			case <-ctx.Done():
				return nil
			case <-done:
				inflight--
			case <-wake:
			case <-sweep.C:
			}
		}
		for drained := false; !drained; {
			select {
			case <-done:
				inflight--
			default:
				drained = true
			}
		}
	}
}

// claimBatch is how many free places a loop with attempts in flight waits
// for before it claims again.
func (d *Deliverer) claimBatch() int {
	return max(1, d.opts.Concurrency/4)
}

// listen signals wake whenever the outbox notifies, and once each time it
// (re)connects; a connection that fails is made again a second later.
func (d *Deliverer) listen(ctx context.Context, wake chan<- struct{}) {
	signal := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	for ctx.Err() == nil {
		err := func() error {
			conn, err := d.pool.Acquire(ctx)
			if err != nil {
				return err
			}
			raw := conn.Hijack() // it carries a LISTEN: it goes back to nobody
			defer raw.Close(context.WithoutCancel(ctx))
			if _, err := raw.Exec(ctx, "LISTEN "+Channel); err != nil {
				return err
			}
			signal()
			for {
				if _, err := raw.WaitForNotification(ctx); err != nil {
					return err
				}
				signal()
			}
		}()
		if ctx.Err() != nil {
			return
		}
		d.opts.Logger.Warn("webhooks: LISTEN failed; reconnecting (the sweep delivers meanwhile)", "error", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// prune deletes settled deliveries older than keepSettled, a batch at a
// time.
func (d *Deliverer) prune(ctx context.Context) {
	for ctx.Err() == nil {
		tag, err := d.pool.Exec(ctx, `DELETE FROM webhook_deliveries WHERE id IN (
			SELECT id FROM webhook_deliveries WHERE status IN ('delivered', 'dead') AND created_at < $1 LIMIT 1000)`,
			d.opts.Clock().Add(-keepSettled))
		if err != nil {
			if !errors.Is(err, context.Canceled) {
				d.opts.Logger.Warn("webhooks: pruning settled deliveries failed; the next pass retries", "error", err)
			}
			return
		}
		if tag.RowsAffected() < 1000 {
			return
		}
	}
}
