package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/procfs"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/agentsaga/agentsaga/agentsagatype"
)

// The pieces of the chaos harness (chaos_test.go) that are not about one
// scenario: pausing a worker process, the payments service the runs charge
// and refund through, and plain-SQL probes of the ledger.

// pause sends SIGSTOP: the process keeps its sockets and its memory but
// runs nothing (no heartbeats, no lease renewals) until resume. A worker
// paused by a long GC, a frozen VM or a laptop lid is the real zombie: it
// wakes up later believing it still holds what it held.
//
// It returns once every thread of the process has stopped: the signal is
// delivered to each thread as it next enters the kernel, and an answer
// released a moment after the kill could otherwise still be read and
// recorded by a thread that had not stopped yet, moving the fault past the
// boundary it was meant to hit.
func (p *process) pause() error {
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return fmt.Errorf("SIGSTOP %s: %w", p.name, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		running, err := runningThreads(p.cmd.Process.Pid)
		if err != nil {
			return fmt.Errorf("SIGSTOP %s: read its threads: %w", p.name, err)
		}
		if running == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("SIGSTOP %s: %d threads still not stopped after 5 s", p.name, running)
		}
		time.Sleep(time.Millisecond)
	}
}

// runningThreads counts the threads of pid not in the stopped state (T).
func runningThreads(pid int) (int, error) {
	threads, err := procfs.AllThreads(pid)
	if err != nil {
		return 0, err
	}
	running := 0
	for _, thread := range threads {
		stat, err := thread.Stat()
		if errors.Is(err, fs.ErrNotExist) {
			continue // the thread has exited
		}
		if err != nil {
			return 0, err
		}
		if stat.State != "T" {
			running++
		}
	}
	return running, nil
}

// resume sends SIGCONT to a paused process.
func (p *process) resume() error {
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return fmt.Errorf("SIGCONT %s: %w", p.name, err)
	}
	return nil
}

// fullLog is everything the process wrote (log keeps only the tail).
func (p *process) fullLog() string {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return ""
	}
	return string(data)
}

// chaosRequest is one request as the payments service saw it arrive.
type chaosRequest struct {
	At      time.Time // on arrival, before anything else: I1 compares it with the run's end
	Key     string    // Idempotency-Key
	Path    string    // /charge, /refund or /ship
	Attempt int       // Agentsaga-Attempt: Temporal's attempt number
	Outcome string    // one of the outcome* constants
}

// What became of a request.
const (
	outcomeExecuted  = "executed"  // the effect happened now
	outcomeReplayed  = "replayed"  // answered from the stored record: no effect
	outcomeDropped   = "dropped"   // its caller went away while it was held before the effect: no effect
	outcomeNotFound  = "not-found" // a refund with no charge under its forward key: nothing to undo
	outcomeForbidden = "forbidden" // /ship always answers 403
	outcomeBad       = "bad-request"
	outcomePending   = "" // still being served
)

// holdPhase says on which side of its effect a held request waits.
type holdPhase int

const (
	// holdBeforeEffect holds the request before it executes. If its caller
	// goes away meanwhile (killed, or gave up at its deadline) it never
	// executes, as with a server that checks the connection before it
	// commits: the effect is then left to a later attempt.
	holdBeforeEffect holdPhase = iota
	// holdAfterEffect executes the request, then holds its answer: the
	// caller cannot know whether the effect happened.
	holdAfterEffect
)

// chaosHold holds the first request of one key that the service would
// execute (a replay is never held).
type chaosHold struct {
	key   string
	phase holdPhase
	// delay, when set, ends the hold by itself: a slow tool. Otherwise the
	// hold lasts until release or until the caller goes away.
	delay   time.Duration
	arrived chan struct{} // closed once the request is held
	release chan struct{}
	once    sync.Once
	// Set before arrived is closed, read after.
	attempt int
	at      time.Time
}

// Release lets the held request go on.
func (h *chaosHold) Release() { h.once.Do(func() { close(h.release) }) }

// waitArrived waits until the held request has arrived (for
// holdAfterEffect: and executed).
func (h *chaosHold) waitArrived(ctx context.Context) error {
	select {
	case <-h.arrived:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("the request with key %s never reached the payments service: %w", h.key, ctx.Err())
	}
}

// wait blocks the held request; it reports false when the caller went away
// first.
func (h *chaosHold) wait(caller context.Context) bool {
	var timer <-chan time.Time
	if h.delay > 0 {
		t := time.NewTimer(h.delay)
		defer t.Stop()
		timer = t.C
	}
	select {
	case <-h.release:
		return true
	case <-timer:
		return true
	case <-caller.Done():
		return false
	}
}

// chaosTool is the payments service of the chaos runs. Like Stripe it is
// idempotent by Idempotency-Key: the first request of a key executes and
// stores its answer, every later one gets the stored answer back, and a
// duplicate that arrives while the first is still being served waits for
// it. So it can count what really happened: executions per key (I4), and
// for each charge whether a refund undid it (I2). It timestamps every
// request on arrival (I1, I5), and can hold the first request of a key on
// either side of its effect.
//
// /charge executes a charge. /refund undoes the charge named by its
// forward_key argument, or answers 404 when no charge executed under that
// key (the engine then records "nothing to undo"). /ship always answers 403,
// which makes the run escalate to a human.
type chaosTool struct {
	*httptest.Server
	mu         sync.Mutex
	keys       map[string]*sync.Mutex // one per key: duplicates are served one at a time
	stored     map[string]string      // key -> the answer its execution stored
	executions map[string]int         // key -> executions (I4: at most 1)
	refunds    map[string]int         // charge key -> refunds executed for it (I2)
	requests   []chaosRequest
	holds      map[string]*chaosHold
}

// startChaosTool serves a chaosTool until t ends.
func startChaosTool(t *testing.T) *chaosTool {
	s := &chaosTool{keys: map[string]*sync.Mutex{}, stored: map[string]string{}, executions: map[string]int{},
		refunds: map[string]int{}, holds: map[string]*chaosHold{}}
	s.Server = httptest.NewServer(s)
	t.Cleanup(s.Close)
	t.Cleanup(s.releaseAll) // before Close, which waits for held requests: cleanups run last first
	return s
}

// hold arranges for the first executing request of key to be held at phase,
// for delay (0: until released or the caller leaves).
func (s *chaosTool) hold(key string, phase holdPhase, delay time.Duration) *chaosHold {
	h := &chaosHold{key: key, phase: phase, delay: delay, arrived: make(chan struct{}), release: make(chan struct{})}
	s.mu.Lock()
	s.holds[key] = h
	s.mu.Unlock()
	return h
}

func (s *chaosTool) releaseAll() {
	s.mu.Lock()
	holds := make([]*chaosHold, 0, len(s.holds))
	for _, h := range s.holds {
		holds = append(holds, h)
	}
	s.mu.Unlock()
	for _, h := range holds {
		h.Release()
	}
}

func (s *chaosTool) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	at := time.Now()
	key := r.Header.Get("Idempotency-Key")
	attempt, _ := strconv.Atoi(r.Header.Get("Agentsaga-Attempt"))
	// Read to EOF: only then does net/http watch the connection and cancel
	// r.Context() when the caller goes away.
	body, _ := io.ReadAll(r.Body)

	s.mu.Lock()
	index := len(s.requests)
	s.requests = append(s.requests, chaosRequest{At: at, Key: key, Path: r.URL.Path, Attempt: attempt})
	if key == "" {
		s.requests[index].Outcome = outcomeBad
		s.mu.Unlock()
		writeChaosAnswer(w, http.StatusBadRequest, `{"error":"Idempotency-Key is required"}`, false)
		return
	}
	keyLock, ok := s.keys[key]
	if !ok {
		keyLock = &sync.Mutex{}
		s.keys[key] = keyLock
	}
	s.mu.Unlock()

	keyLock.Lock()
	defer keyLock.Unlock()

	s.mu.Lock()
	if answer, replay := s.stored[key]; replay {
		s.requests[index].Outcome = outcomeReplayed
		s.mu.Unlock()
		writeChaosAnswer(w, http.StatusOK, answer, true)
		return
	}
	h := s.holds[key]
	if h != nil && h.attempt == 0 {
		h.attempt, h.at = max(attempt, 1), at
	} else {
		h = nil // held once only
	}
	s.mu.Unlock()

	if h != nil && h.phase == holdBeforeEffect {
		close(h.arrived)
		if !h.wait(r.Context()) {
			s.setOutcome(index, outcomeDropped)
			return
		}
	}
	status, answer, outcome := s.execute(r.URL.Path, key, body)
	s.setOutcome(index, outcome)
	if h != nil && h.phase == holdAfterEffect {
		close(h.arrived)
		h.wait(r.Context())
	}
	writeChaosAnswer(w, status, answer, false)
}

// execute applies one request's effect and returns its answer.
func (s *chaosTool) execute(path, key string, body []byte) (status int, answer, outcome string) {
	var args map[string]any
	_ = json.Unmarshal(body, &args)
	s.mu.Lock()
	defer s.mu.Unlock()
	switch path {
	case "/charge":
		answer = fmt.Sprintf(`{"id":"ch_%v_%v"}`, args["customer"], args["amount"])
	case "/refund":
		forward, _ := args["forward_key"].(string)
		switch {
		case forward == "":
			return http.StatusBadRequest, `{"error":"forward_key is required"}`, outcomeBad
		case s.executions[forward] == 0:
			return http.StatusNotFound, fmt.Sprintf(`{"error":"no charge under key %s"}`, forward), outcomeNotFound
		}
		s.refunds[forward]++
		answer = fmt.Sprintf(`{"refunded":%q}`, forward)
	case "/ship":
		return http.StatusForbidden, `{"error":"this account may not ship"}`, outcomeForbidden
	default:
		return http.StatusNotFound, `{"error":"no such endpoint"}`, outcomeBad
	}
	s.stored[key] = answer
	s.executions[key]++
	return http.StatusOK, answer, outcomeExecuted
}

func (s *chaosTool) setOutcome(index int, outcome string) {
	s.mu.Lock()
	s.requests[index].Outcome = outcome
	s.mu.Unlock()
}

func writeChaosAnswer(w http.ResponseWriter, status int, answer string, replayed bool) {
	w.Header().Set("Content-Type", "application/json")
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.WriteHeader(status)
	fmt.Fprint(w, answer)
}

// chaosToolState is a copy of what the service saw and did.
type chaosToolState struct {
	requests   []chaosRequest
	executions map[string]int
	refunds    map[string]int
}

func (s *chaosTool) state() chaosToolState {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := chaosToolState{requests: append([]chaosRequest(nil), s.requests...), executions: map[string]int{}, refunds: map[string]int{}}
	for k, v := range s.executions {
		st.executions[k] = v
	}
	for k, v := range s.refunds {
		st.refunds[k] = v
	}
	return st
}

// firstRequestAfter is the first request of key from an attempt later than
// attempt: the takeover of a faulted attempt.
func (st chaosToolState) firstRequestAfter(key string, attempt int) (chaosRequest, bool) {
	for _, req := range st.requests {
		if req.Key == key && req.Attempt > attempt {
			return req, true
		}
	}
	return chaosRequest{}, false
}

// chaosLedger asks the ledger behind a run about it in plain SQL, on a
// fresh connection each time: it must survive the Postgres restarts the
// harness causes, and it reads the tables rather than going through the
// ledger package, whose code is what the harness tests.
type chaosLedger struct {
	url string
	// account, when set, is the only cap account the spend reads see (its
	// caps, their periods, the holds charged to it): the soak
	// (soak_test.go) runs many runs on one ledger, each on an account of
	// its own, so I6 and I7 read one run's caps while others are in flight.
	account string
}

func (l chaosLedger) connect(ctx context.Context) (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, l.url)
	if err != nil {
		return nil, fmt.Errorf("connect to the ledger: %w", err)
	}
	return conn, nil
}

// ledgerRun is the part of a runs row the invariants read.
type ledgerRun struct {
	Status     string
	Reason     string
	FinishedAt *time.Time
}

func (l chaosLedger) run(ctx context.Context, workflowID string) (ledgerRun, error) {
	conn, err := l.connect(ctx)
	if err != nil {
		return ledgerRun{}, err
	}
	defer conn.Close(context.Background())
	var r ledgerRun
	err = conn.QueryRow(ctx, `SELECT status, reason, finished_at FROM runs WHERE workflow_id = $1`, workflowID).
		Scan(&r.Status, &r.Reason, &r.FinishedAt)
	if err != nil {
		return ledgerRun{}, fmt.Errorf("read run %s: %w", workflowID, err)
	}
	return r, nil
}

// ledgerAction is the part of an actions row the invariants read.
type ledgerAction struct {
	Status      string
	Attempts    int
	CompletedAt *time.Time
}

func (l chaosLedger) actions(ctx context.Context, workflowID string) (map[string]ledgerAction, error) {
	conn, err := l.connect(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT idempotency_key, status, attempts, completed_at FROM actions WHERE workflow_id = $1`, workflowID)
	if err != nil {
		return nil, fmt.Errorf("read actions of %s: %w", workflowID, err)
	}
	defer rows.Close()
	byKey := map[string]ledgerAction{}
	for rows.Next() {
		var key string
		var a ledgerAction
		if err := rows.Scan(&key, &a.Status, &a.Attempts, &a.CompletedAt); err != nil {
			return nil, fmt.Errorf("read actions of %s: %w", workflowID, err)
		}
		byKey[key] = a
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read actions of %s: %w", workflowID, err)
	}
	return byKey, nil
}

// ledgerSpendCap is a row of spend_caps.
type ledgerSpendCap struct {
	Account, Period string
	USD             float64
}

func (l chaosLedger) spendCaps(ctx context.Context) ([]ledgerSpendCap, error) {
	conn, err := l.connect(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT account, period, usd::float8 FROM spend_caps WHERE $1 = '' OR account = $1 ORDER BY account, period`, l.account)
	if err != nil {
		return nil, fmt.Errorf("read the spend caps: %w", err)
	}
	caps, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ledgerSpendCap, error) {
		var c ledgerSpendCap
		return c, row.Scan(&c.Account, &c.Period, &c.USD)
	})
	if err != nil {
		return nil, fmt.Errorf("read the spend caps: %w", err)
	}
	return caps, nil
}

// ledgerSpendPeriod is a row of spend_periods, with its cap's USD.
type ledgerSpendPeriod struct {
	Account, Period         string
	Starts                  time.Time
	CapUSD, Spent, Reserved float64
}

func (l chaosLedger) spendPeriods(ctx context.Context) ([]ledgerSpendPeriod, error) {
	conn, err := l.connect(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT p.account, p.period, p.starts, c.usd::float8, p.spent::float8, p.reserved::float8
		FROM spend_periods p JOIN spend_caps c USING (account, period) WHERE $1 = '' OR p.account = $1
		ORDER BY p.account, p.period, p.starts`, l.account)
	if err != nil {
		return nil, fmt.Errorf("read the spend periods: %w", err)
	}
	periods, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ledgerSpendPeriod, error) {
		var p ledgerSpendPeriod
		return p, row.Scan(&p.Account, &p.Period, &p.Starts, &p.CapUSD, &p.Spent, &p.Reserved)
	})
	if err != nil {
		return nil, fmt.Errorf("read the spend periods: %w", err)
	}
	return periods, nil
}

// ledgerSpendHold is a row of spend_holds: a reservation not settled yet.
type ledgerSpendHold struct {
	Key        string
	USD        float64
	LeaseUntil time.Time
}

func (l chaosLedger) spendHolds(ctx context.Context) ([]ledgerSpendHold, error) {
	conn, err := l.connect(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT idempotency_key, usd::float8, lease_until FROM spend_holds WHERE $1 = '' OR $1 = ANY(accounts)
		ORDER BY idempotency_key`, l.account)
	if err != nil {
		return nil, fmt.Errorf("read the spend holds: %w", err)
	}
	holds, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ledgerSpendHold, error) {
		var h ledgerSpendHold
		return h, row.Scan(&h.Key, &h.USD, &h.LeaseUntil)
	})
	if err != nil {
		return nil, fmt.Errorf("read the spend holds: %w", err)
	}
	return holds, nil
}

// ledgerAdmission is a run's row in its account's admission queue.
type ledgerAdmission struct {
	Status string
	Held   float64
}

// runAdmissions reads the admission rows of the run wf.
func (l chaosLedger) runAdmissions(ctx context.Context, wf string) ([]ledgerAdmission, error) {
	conn, err := l.connect(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT status, held::float8 FROM run_admissions WHERE run_id = $1`, wf)
	if err != nil {
		return nil, fmt.Errorf("read the admission of %s: %w", wf, err)
	}
	admissions, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ledgerAdmission, error) {
		var a ledgerAdmission
		return a, row.Scan(&a.Status, &a.Held)
	})
	if err != nil {
		return nil, fmt.Errorf("read the admission of %s: %w", wf, err)
	}
	return admissions, nil
}

// spendLeaseEnd is when the last spend hold left lapses; nil when none
// is left.
func (l chaosLedger) spendLeaseEnd(ctx context.Context) (*time.Time, error) {
	conn, err := l.connect(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	var until *time.Time
	if err := conn.QueryRow(ctx, `SELECT max(lease_until) FROM spend_holds WHERE $1 = '' OR $1 = ANY(accounts)`, l.account).Scan(&until); err != nil {
		return nil, fmt.Errorf("read the spend holds' leases: %w", err)
	}
	return until, nil
}

// modelUsage adds up the usage the run's completed model turns reported,
// as the ledger stored each turn's reply.
func (l chaosLedger) modelUsage(ctx context.Context, workflowID string) (turns int, usage agentsagatype.Usage, err error) {
	conn, err := l.connect(ctx)
	if err != nil {
		return 0, usage, err
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT idempotency_key, result FROM actions
		WHERE workflow_id = $1 AND tool LIKE 'model:%' AND status = 'completed' ORDER BY id`, workflowID)
	if err != nil {
		return 0, usage, fmt.Errorf("read the model turns of %s: %w", workflowID, err)
	}
	defer rows.Close()
	for rows.Next() {
		var key string
		var result *string
		if err := rows.Scan(&key, &result); err != nil {
			return 0, usage, fmt.Errorf("read the model turns of %s: %w", workflowID, err)
		}
		var turn agentsagatype.ModelTurn
		if result == nil || json.Unmarshal([]byte(*result), &turn) != nil {
			return 0, usage, fmt.Errorf("model turn %s is completed but its stored reply does not decode", key)
		}
		turns++
		usage.InputTokens += turn.Usage.InputTokens
		usage.OutputTokens += turn.Usage.OutputTokens
	}
	if err := rows.Err(); err != nil {
		return 0, usage, fmt.Errorf("read the model turns of %s: %w", workflowID, err)
	}
	return turns, usage, nil
}

// waitersOn counts the sessions waiting for a lock that h holds: a
// worker whose claim the harness blocked. Only h's waiters count: another
// session waiting a moment for some other lock (a notifying commit waits
// for Postgres's cluster-wide NOTIFY lock, say) is not the claim, and a
// fault injected on its word would hit an attempt that never started.
func (l chaosLedger) waitersOn(ctx context.Context, h *sqlHold) (int, error) {
	conn, err := l.connect(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.Background())
	var n int
	err = conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
		WHERE $1::int = ANY(pg_blocking_pids(pid))`, h.pid).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("read the sessions waiting on session %d: %w", h.pid, err)
	}
	return n, nil
}

// sqlHold is an open transaction that holds a lock until release.
type sqlHold struct {
	conn *pgx.Conn
	tx   pgx.Tx
	pid  uint32 // the session's backend process, which its waiters name
	once sync.Once
}

// release rolls the transaction back. After a Postgres restart the session
// is gone already, and so is the lock: errors are ignored.
func (h *sqlHold) release() {
	h.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = h.tx.Rollback(ctx)
		_ = h.conn.Close(ctx)
	})
}

func (l chaosLedger) begin(ctx context.Context) (*sqlHold, error) {
	conn, err := l.connect(ctx)
	if err != nil {
		return nil, err
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		conn.Close(context.Background())
		return nil, fmt.Errorf("begin: %w", err)
	}
	return &sqlHold{conn: conn, tx: tx, pid: conn.PgConn().PID()}, nil
}

// blockClaim inserts, in a transaction it leaves open, a placeholder row
// under key. Postgres makes any other INSERT of the same unique key wait
// until that transaction ends, so the worker's first claim of the key
// blocks, however the engine phrases it, until release rolls the row back
// and leaves no trace of it.
func (l chaosLedger) blockClaim(ctx context.Context, workflowID, activityID, key string) (*sqlHold, error) {
	h, err := l.begin(ctx)
	if err != nil {
		return nil, err
	}
	_, err = h.tx.Exec(ctx, `INSERT INTO actions (idempotency_key, workflow_id, activity_id, tool, request_fingerprint, arguments, status)
		VALUES ($1, $2, $3, 'chaos-placeholder', 'chaos-placeholder', '{}', 'started')`, key, workflowID, activityID)
	if err != nil {
		h.release()
		return nil, fmt.Errorf("insert the placeholder that blocks the claim of %s: %w", key, err)
	}
	return h, nil
}

// blockAdmission holds the lock that admission passes over the queue of
// root take, in a transaction it leaves open: a run's admission, which
// runs a pass, waits until release.
func (l chaosLedger) blockAdmission(ctx context.Context, root string) (*sqlHold, error) {
	h, err := l.begin(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := h.tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('admission' || chr(31) || $1, 0))`, root); err != nil {
		h.release()
		return nil, fmt.Errorf("hold the admission lock of %s: %w", root, err)
	}
	return h, nil
}

// lockAction locks key's actions row FOR UPDATE in a transaction it leaves
// open: a claim that updates the row (an INSERT ... ON CONFLICT DO UPDATE
// locks the row it conflicts with) waits until release.
func (l chaosLedger) lockAction(ctx context.Context, key string) (*sqlHold, error) {
	h, err := l.begin(ctx)
	if err != nil {
		return nil, err
	}
	var got string
	err = h.tx.QueryRow(ctx, `SELECT idempotency_key FROM actions WHERE idempotency_key = $1 FOR UPDATE`, key).Scan(&got)
	if err != nil {
		h.release()
		return nil, fmt.Errorf("lock the actions row of %s: %w", key, err)
	}
	return h, nil
}

// pendingAttempt is the attempt of activityID Temporal has started, when
// it started, and the identity of the worker that took it; ok is false
// while that activity is not started (not scheduled yet, or waiting for its
// retry).
func pendingAttempt(ctx context.Context, c client.Client, workflowID, activityID string) (attempt startedAttempt, ok bool, err error) {
	described, err := c.DescribeWorkflowExecution(ctx, workflowID, "")
	if err != nil {
		return startedAttempt{}, false, fmt.Errorf("describe %s: %w", workflowID, err)
	}
	for _, pending := range described.GetPendingActivities() {
		if pending.GetActivityId() == activityID && pending.GetState() == enumspb.PENDING_ACTIVITY_STATE_STARTED {
			return startedAttempt{number: int(pending.GetAttempt()), identity: pending.GetLastWorkerIdentity(),
				at: pending.GetLastStartedTime().AsTime()}, true, nil
		}
	}
	return startedAttempt{}, false, nil
}

// startedAttempt is one attempt of an activity as Temporal reports it.
type startedAttempt struct {
	number   int
	identity string    // the worker's identity: "<pid>@<host>@" by default
	at       time.Time // when Temporal handed it to that worker
}

// pollUntil calls cond every interval until it returns true, and fails
// with what it was waiting for when ctx ends first.
func pollUntil(ctx context.Context, what string, interval time.Duration, cond func() bool) error {
	for !cond() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-time.After(interval):
		}
	}
	return nil
}

// sleepCtx sleeps for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// isValidatorRefusal reports whether an Update was refused by its
// validator because the run was not (yet) waiting for it.
func isValidatorRefusal(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "not waiting") || strings.Contains(err.Error(), "does not apply"))
}
