package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/agentsaga/agentsaga/agentsagatest"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/workflows"
)

// The chaos harness (issue 11, item 5) checks the ledger's promise, "once
// means once, even for zombies", the way Jepsen checks a database: real
// worker processes, a real Temporal dev server and Postgres, and a payments
// service that is idempotent by key and counts what really happened. Each
// run charges ann, bob and cat; a fault hits bob's charge (or, during the
// walk, bob's refund) at one boundary of a tool call. Each run is also
// charged to an account (issue 31) whose spend cap, set before the run
// starts, pays for the three charging turns and, in most runs, not for the
// fourth (chaosCapMode): the run finishes, or escalates and is aborted. When
// everything has settled, and once every spend hold's lease has passed and
// the ledger's ExpireSpendHolds has ended what outlived its lease, the run
// is checked against seven invariants:
//
//	I1  no tool request for a run's key arrives after the run has ended
//	    (the ledger's runs.finished_at, against the service's arrival time);
//	I2  every charge a compensated run applied was refunded, or the run is
//	    needs-attention and names it;
//	I3  the model is never told that a call failed whose effect the ledger
//	    knows happened (a failed trace entry whose action is completed);
//	I4  every key is executed at most once at the service (answers from its
//	    stored record do not count);
//	I5  after a kill or a pause, a later attempt reaches the service within
//	    the heartbeat timeout plus 5 s;
//	I6  no period of the account's cap spent more than the cap, and its
//	    periods together spent no less than what the run's model turns
//	    cost (their reported usage at the spec's price): the cap was never
//	    passed in fact, unseen;
//	I7  nothing is left reserved: no period holds a reservation and no
//	    spend hold is left;
//	I8  the run was admitted once, and its admission ended with the run:
//	    one admission row, ended, holding nothing (a run reservation
//	    admitted twice, or never given back, is also a period's
//	    reservation left, which I7 counts);
//	I9  the fork case (boundaryForking, chaos_fork_test.go): no effect of
//	    a forked run is owned by both it and its fork, or by neither, after
//	    its `agentsaga fork` was killed mid-move, after the fork, and after
//	    the fork's worker was killed and both walks ran; every charge is
//	    refunded exactly once.
//
// `make test` runs a small configuration in about two minutes; `make chaos`
// runs every fault at every boundary with every timeout, more than once, and
// prints the same table.

var (
	chaosSizeFlag     = flag.String("chaos.size", "", "chaos harness size: small (the default, in make test) or large (make chaos); CHAOS_SIZE when unset")
	chaosRunsFlag     = flag.Int("chaos.runs", 0, "runs per cell in the large configuration (default 2); CHAOS_RUNS when unset")
	chaosParallelFlag = flag.Int("chaos.parallel", 0, "runs at once in the large configuration (default 6); CHAOS_PARALLEL when unset")
	chaosOutFlag      = flag.String("chaos.out", "", "also write the chaos table to this file")
)

// chaosFault is what the harness does to the run.
type chaosFault string

const (
	// faultKill: SIGKILL of the worker running the attempt, as the OOM
	// killer or a lost node does; a fresh worker is started.
	faultKill chaosFault = "kill-9"
	// faultPause: SIGSTOP of that worker, SIGCONT once another worker has
	// taken over or the run has ended: the zombie that wakes up believing
	// it still holds its claim.
	faultPause chaosFault = "sigstop"
	// faultPostgres: the ledger's Postgres (the run's own) is stopped,
	// down for 2 s, and started again on the same data.
	faultPostgres chaosFault = "pg-restart"
	// faultSlow: the step outlasts its timeout without any process dying:
	// a tool that answers after the attempt's deadline, or a claim that
	// waits longer than the heartbeat timeout for its row.
	faultSlow chaosFault = "slow"
)

// chaosBoundary is where in a tool call the fault strikes.
type chaosBoundary string

const (
	// Before the claim: the attempt has started and its claim of the key is
	// blocked (the harness holds an uncommitted row under the key).
	boundaryBeforeClaim chaosBoundary = "before-claim"
	// While waiting for a key: attempt 1 is inside the service (its charge
	// executed) when its worker is killed; attempt 2, on a second worker,
	// waits for the dead attempt's key (the harness holds the row lock, so
	// it is still waiting when the fault strikes it).
	boundaryWaitingKey chaosBoundary = "waiting-for-key"
	// During the effect: the request is inside the service, not executed
	// yet. If its caller dies it is never executed.
	boundaryDuringEffect chaosBoundary = "during-effect"
	// Between the effect and its completion: the service has executed the
	// charge and holds the answer.
	boundaryAfterEffect chaosBoundary = "after-effect"
	// During the walk: the run was aborted and is refunding; bob's refund
	// has executed and its answer is held.
	boundaryDuringWalk chaosBoundary = "during-walk"
	// While admitting: the run's first workflow task asks the ledger to
	// admit it, and the statement waits for the queue's pass lock, which
	// the harness holds. The fault strikes the worker whose admission
	// waits; the lock is let go after it.
	boundaryAdmitting chaosBoundary = "admitting"
	// While forking: the fork's move of the effects waits for a row, and
	// the `agentsaga fork` process is killed; then the fork's worker is
	// killed during its first call (chaos_fork_test.go). Only with
	// faultKill, and it counts I9 alone.
	boundaryForking chaosBoundary = "forking"
)

// How a run ends when nothing goes wrong.
const (
	// endingCommit: after the charges the model answers; the run completes.
	endingCommit = "commit"
	// endingAbort: after the charges the model ships, the service answers
	// 403, the run escalates and the harness aborts it: the run compensates.
	endingAbort = "abort"
)

var (
	chaosFaults     = []chaosFault{faultKill, faultPause, faultPostgres, faultSlow}
	chaosBoundaries = []chaosBoundary{boundaryBeforeClaim, boundaryWaitingKey, boundaryDuringEffect, boundaryAfterEffect, boundaryDuringWalk,
		boundaryAdmitting}
	chaosTimeouts = []int{3, 30, 60}
)

// chaosCapMode is how the spend cap of a run's account meets its model
// turns. The first three turns (ann's, bob's and cat's charges) always fit
// it; a cap sized to bind refuses the fourth (the answer or the ship),
// after the fault.
type chaosCapMode string

const (
	// capRoomy has room for every turn: the run ends as it would without
	// a cap (the issue's scenario, and the abort ending's 403 path).
	capRoomy chaosCapMode = "room"
	// capFinish binds on the fourth turn, on_exhausted finish: the run
	// ends partial without a last model turn.
	capFinish chaosCapMode = "finish"
	// capFinishReserve is capFinish whose cap keeps chaosFinishReserve of
	// itself for finishing turns: the run ends partial with a finishing
	// turn paid from it.
	capFinishReserve chaosCapMode = "finish-reserve"
	// capEscalate binds on the fourth turn (the ship), on_exhausted
	// escalate: the run escalates, the harness aborts it, and it
	// compensates, as the 403 would have made it.
	capEscalate chaosCapMode = "escalate"
)

// The runs' account and its cap. A turn costs its usage at
// chaosUSDPerMillion (the scripted model reports a token per four bytes of
// each message, and one for a reply of tool calls) and reserves its
// prompt's estimate (which counts the tool definitions too) and
// chaosMaxTokens. Measured: the three charging turns cost $0.074, $0.114
// and $0.120; the third reserves $0.337 with $0.188 spent ($0.525 in
// all), the fourth $0.383 with $0.308 spent ($0.691). chaosCapUSD admits
// the third and refuses the fourth, with $0.075 and $0.091 of margin
// (TestChaos fails if a cap sized to bind refused nothing).
const (
	chaosAccount        = "chaos/payments"
	chaosCapAccount     = "chaos" // the parent: the runs are charged to its caps too
	chaosModel          = "chaos-model"
	chaosUSDPerMillion  = 1000.0
	chaosMaxTokens      = 16
	chaosCapUSD         = 0.60
	chaosRoomyCapUSD    = 100.0
	chaosFinishReserve  = 0.5
	chaosSpendTolerance = 1e-9
)

// capMode picks the case's cap: the issue's scenario and the abort
// endings at a tool boundary keep their 403 path; the commit endings
// finish on the cap (with a finishing reserve on a pause or a slow tool),
// and the abort endings that fault while waiting for a key or during the
// walk escalate on it.
func (cc chaosCase) capMode() chaosCapMode {
	switch {
	case cc.Label != "":
		return capRoomy
	case cc.Ending == endingCommit && (cc.Fault == faultKill || cc.Fault == faultPostgres):
		return capFinish
	case cc.Ending == endingCommit:
		return capFinishReserve
	case cc.Boundary == boundaryWaitingKey || cc.Boundary == boundaryDuringWalk:
		return capEscalate
	}
	return capRoomy
}

// spendCap is the cap the harness sets on the runs' account before the
// run starts.
func (cc chaosCase) spendCap() ledgerdb.SpendCap {
	c := ledgerdb.SpendCap{Account: chaosCapAccount, Period: ledgerdb.SpendMonth, USD: chaosCapUSD, OnExhausted: agentsagatype.OnExhaustedFinish}
	switch cc.capMode() {
	case capRoomy:
		c.USD = chaosRoomyCapUSD
	case capFinishReserve:
		// Ordinary turns have chaosCapUSD of room, as with capFinish.
		c.USD, c.FinishReserve = chaosCapUSD/(1-chaosFinishReserve), chaosFinishReserve
	case capEscalate:
		c.OnExhausted = agentsagatype.OnExhaustedEscalate
	}
	return c
}

// chaosCase is one run of the harness.
type chaosCase struct {
	// Label names a row that is not a plain cell ("issue-11").
	Label    string
	Fault    chaosFault
	Boundary chaosBoundary
	// Timeout is every tool's timeout_seconds; the heartbeat timeout is
	// min(Timeout, 10 s).
	Timeout int
	Ending  string
	Run     int
	// DefaultRetry keeps the default retry policy (3 attempts), as in the
	// issue's scenario. Other runs allow 5 attempts, so a call whose
	// attempts the faults used up still finishes: the harness then sees the
	// takeover path instead of a call that simply failed.
	DefaultRetry bool
}

func (cc chaosCase) name() string {
	label := string(cc.Fault)
	if cc.Label != "" {
		label = cc.Label
	}
	return fmt.Sprintf("%s_%s_%ds_%s_%d", label, cc.Boundary, cc.Timeout, cc.Ending, cc.Run)
}

// row names the table row the case counts in.
func (cc chaosCase) row() string {
	return fmt.Sprintf("%s|%s|%s|%d", cc.Label, cc.Fault, cc.Boundary, cc.Timeout)
}

func (cc chaosCase) timeout() time.Duration { return time.Duration(cc.Timeout) * time.Second }

// heartbeatTimeout is what the workflow gives a tool call:
// min(timeout_seconds, 10 s).
func (cc chaosCase) heartbeatTimeout() time.Duration { return min(cc.timeout(), 10*time.Second) }

// chaosConfig is the harness's size.
type chaosConfig struct {
	large    bool
	runs     int // per cell, large only
	parallel int // runs at once
	out      string
}

func chaosConfigFrom(t *testing.T) chaosConfig {
	t.Helper()
	size := *chaosSizeFlag
	if size == "" {
		size = os.Getenv("CHAOS_SIZE")
	}
	if size != "" && size != "small" && size != "large" {
		t.Fatalf("-chaos.size (CHAOS_SIZE) is %q: want small or large", size)
	}
	cfg := chaosConfig{large: size == "large", runs: 2, parallel: 6, out: *chaosOutFlag}
	number := func(flagValue int, env string, into *int) {
		if flagValue > 0 {
			*into = flagValue
			return
		}
		if v := os.Getenv(env); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				t.Fatalf("%s is %q: want a positive number", env, v)
			}
			*into = n
		}
	}
	number(*chaosRunsFlag, "CHAOS_RUNS", &cfg.runs)
	number(*chaosParallelFlag, "CHAOS_PARALLEL", &cfg.parallel)
	return cfg
}

// issueScenario is the one issue 11 measured: three charges with a 60 s
// timeout, the worker killed while bob's charge is inside the service (so
// it never executes), a second worker, a 403 that escalates, an abort. The
// old engine later let a zombie attempt send that charge after the run said
// compensated.
var issueScenario = chaosCase{Label: "issue-11", Fault: faultKill, Boundary: boundaryDuringEffect, Timeout: 60,
	Ending: endingAbort, DefaultRetry: true}

// chaosPlan lists the runs. The small one picks a run per boundary and per
// fault, with long timeouts where a pause can only matter with them (a
// paused attempt that wakes after its own deadline can send nothing), and
// runs them all at once; the large one is every fault x boundary x timeout.
func chaosPlan(cfg chaosConfig) []chaosCase {
	if !cfg.large {
		issue := issueScenario
		issue.Run = 1
		return []chaosCase{
			issue,
			{Fault: faultKill, Boundary: boundaryBeforeClaim, Timeout: 3, Ending: endingCommit, Run: 1},
			{Fault: faultKill, Boundary: boundaryWaitingKey, Timeout: 3, Ending: endingAbort, Run: 1},
			{Fault: faultKill, Boundary: boundaryDuringWalk, Timeout: 3, Ending: endingAbort, Run: 1},
			{Fault: faultKill, Boundary: boundaryAdmitting, Timeout: 3, Ending: endingCommit, Run: 1},
			{Fault: faultKill, Boundary: boundaryForking, Timeout: 3, Ending: endingAbort, Run: 1},
			{Fault: faultPause, Boundary: boundaryBeforeClaim, Timeout: 30, Ending: endingCommit, Run: 1},
			{Fault: faultPause, Boundary: boundaryWaitingKey, Timeout: 30, Ending: endingAbort, Run: 1},
			{Fault: faultPause, Boundary: boundaryAfterEffect, Timeout: 30, Ending: endingAbort, Run: 1},
			{Fault: faultPostgres, Boundary: boundaryAfterEffect, Timeout: 3, Ending: endingAbort, Run: 1},
			{Fault: faultSlow, Boundary: boundaryDuringEffect, Timeout: 3, Ending: endingCommit, Run: 1},
		}
	}
	var plan []chaosCase
	for run := 1; run <= cfg.runs; run++ {
		issue := issueScenario
		issue.Run = run
		plan = append(plan, issue)
		// The fork case strikes its own two places (a kill only).
		plan = append(plan, chaosCase{Fault: faultKill, Boundary: boundaryForking, Timeout: 3, Ending: endingAbort, Run: run})
	}
	// Longest first, so the slow runs do not all end up at the tail.
	timeouts := append([]int(nil), chaosTimeouts...)
	sort.Sort(sort.Reverse(sort.IntSlice(timeouts)))
	for _, timeout := range timeouts {
		for _, fault := range chaosFaults {
			for _, boundary := range chaosBoundaries {
				for run := 1; run <= cfg.runs; run++ {
					ending := endingAbort
					if run%2 == 0 && boundary != boundaryDuringWalk {
						ending = endingCommit
					}
					plan = append(plan, chaosCase{Fault: fault, Boundary: boundary, Timeout: timeout, Ending: ending, Run: run})
				}
			}
		}
	}
	return plan
}

// TestChaos runs the chaos plan against the agentsaga binary built from
// this tree, one Temporal dev server with a namespace per concurrent run,
// and a database (or, for Postgres restarts, a Postgres server) per run,
// then prints the table of violations. It fails if any count is not 0.
// chaosSmallParallel is how many runs of the small configuration run at
// once.
const chaosSmallParallel = 5

func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("the chaos harness runs real processes for a minute or more")
	}
	t.Parallel()
	cfg := chaosConfigFrom(t)
	plan := chaosPlan(cfg)
	// The small configuration runs beside the package's other tests on a
	// 2-core machine: all nine cells at once (each with its workers, its
	// service, one with a Postgres server of its own) once pushed two
	// takeovers 1.4-1.8 s past I5's bound under -race, on CPU, not on the
	// engine. Five at a time keeps the bound a fact about the engine.
	parallel := min(chaosSmallParallel, len(plan))
	if cfg.large {
		parallel = min(cfg.parallel, len(plan))
	}
	began := time.Now()
	dir := t.TempDir()
	bin := buildAgentsaga(t)
	namespaces := make([]string, parallel)
	for i := range namespaces {
		namespaces[i] = fmt.Sprintf("chaos-%d", i)
	}
	temporal := startTemporalServer(t, dir, namespaces...)
	outcomes := runChaosPlan(t, chaosEnv{bin: bin, temporal: temporal}, namespaces, plan)

	table := chaosTable(plan, outcomes)
	size := "small"
	if cfg.large {
		size = "large"
	}
	heading := fmt.Sprintf("chaos harness, %s configuration: %d runs in %s", size, len(outcomes), time.Since(began).Round(time.Second))
	t.Logf("%s\n%s", heading, table)
	if cfg.large {
		fmt.Printf("%s\n%s", heading, table)
	}
	if cfg.out != "" {
		if err := os.WriteFile(cfg.out, []byte(heading+"\n"+table), 0o644); err != nil {
			t.Errorf("write the chaos table to %s: %v", cfg.out, err)
		}
	}
	total := 0
	for _, o := range outcomes {
		for _, n := range o.Violations {
			total += n
		}
	}
	if total > 0 {
		t.Errorf("%d invariant violations (the table above; each subtest's log has the evidence)", total)
	}
}

// runChaosPlan runs plan on temporal, as many runs at once as there are
// namespaces (each run has one to itself), and returns what each found.
// The runs are subtests started from goroutines rather than t.Parallel
// subtests: -parallel (GOMAXPROCS, 2 on the 2-core machine) would otherwise
// run two at a time, and a run spends nearly all its time waiting for
// timeouts, not on the CPU.
func runChaosPlan(t *testing.T, env chaosEnv, namespaces []string, plan []chaosCase) []chaosOutcome {
	free := make(chan string, len(namespaces))
	for _, ns := range namespaces {
		free <- ns
	}
	var mu sync.Mutex
	var outcomes []chaosOutcome
	var wg sync.WaitGroup
	for _, cc := range plan {
		ns := <-free // taken here, so runs start in the plan's order
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { free <- ns }()
			t.Run(cc.name(), func(t *testing.T) {
				out := chaosOutcome{Case: cc, Takeover: -1, Err: "the run stopped before its checks (see its log)"}
				defer func() {
					if t.Skipped() {
						return
					}
					mu.Lock()
					outcomes = append(outcomes, out)
					mu.Unlock()
				}()
				env := env
				env.namespace = ns
				out = runChaosCase(t, env, cc)
			})
		}()
	}
	wg.Wait()
	return outcomes
}

// chaosEnv is what the runs share.
type chaosEnv struct {
	bin       string
	temporal  *temporalServer
	namespace string
	// takeoverMeasured reports I5 (the takeover bound) instead of failing
	// on it: for a configuration measured to show why the bound needs
	// what it is run without (cluster_test.go, the worker's poll cap
	// off). I1-I4 and I6-I8 still fail the run.
	takeoverMeasured bool
}

// chaosOutcome is what one run found.
type chaosOutcome struct {
	Case   chaosCase
	Status string
	// Missed says why the fault did not strike at its boundary (the run
	// still counts for I1-I4 and I6-I8, not for I5).
	Missed string
	// CapMissed says why a cap sized to refuse a turn refused none (the
	// run still counts for I6-I8; TestChaos fails on it).
	CapMissed string
	// Err says why the run could not be checked.
	Err        string
	Violations [9]int
	// Capped counts the model turns the account's spend cap refused, and
	// Expired the spend holds ExpireSpendHolds had to end after the run
	// (their worker never settled them).
	Capped, Expired int
	// Takeover is the time from the kill or pause to the next attempt's
	// request; -1 when not measured.
	Takeover time.Duration
	// ToPaused counts the faulted call's attempts that Temporal handed to
	// the paused worker while it was paused.
	ToPaused int
	Evidence []string
}

func (o *chaosOutcome) violate(invariant int, format string, args ...any) {
	o.Violations[invariant-1]++
	o.Evidence = append(o.Evidence, fmt.Sprintf("I%d: ", invariant)+fmt.Sprintf(format, args...))
}

// chaosRun is the state of one run while the harness drives it.
type chaosRun struct {
	t      *testing.T
	env    chaosEnv
	cc     chaosCase
	began  time.Time
	c      client.Client
	wf     string
	spec   workflows.RunSpec
	pg     *privatePostgres // for Postgres restarts: the run's own server
	ledger chaosLedger
	tool   *chaosTool

	workers []*process
	block   *sqlHold   // before-claim: the placeholder row
	hold    *chaosHold // the request the service holds

	// faultActivity and faultKey name the call the fault is aimed at.
	faultActivity, faultKey string
	// faultAttempt is the attempt the kill or pause struck; a takeover is
	// a request from a later one.
	faultAttempt int
	faultAt      time.Time
	paused       *process
	wokeAt       time.Time
	missed       string

	mu    sync.Mutex
	notes []string
	// seen is every attempt of the faulted activity Temporal reported
	// started, by number.
	seen map[int]startedAttempt
}

// note records what the harness did, for the run's summary.
func (r *chaosRun) note(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notes = append(r.notes, fmt.Sprintf("%s %s", r.clock(time.Now()), fmt.Sprintf(format, args...)))
}

// clock is a time relative to the run's start, for timelines.
func (r *chaosRun) clock(at time.Time) string {
	return fmt.Sprintf("+%6.3fs", at.Sub(r.began).Seconds())
}

func (r *chaosRun) must(err error) {
	r.t.Helper()
	if err != nil {
		r.t.Fatalf("%s: %v", r.cc.name(), err)
	}
}

// limit bounds the whole run, generously: on an engine whose takeover costs
// the tool's whole timeout, a call can take five of them.
func (r *chaosRun) limit() time.Duration { return 8*r.cc.timeout() + 150*time.Second }

func runChaosCase(t *testing.T, env chaosEnv, cc chaosCase) chaosOutcome {
	r := &chaosRun{t: t, env: env, cc: cc, began: time.Now(), wf: "chaos-" + cc.name()}
	if cc.Boundary == boundaryForking {
		out := runForkChaosCase(r)
		r.report(out)
		return out
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.limit())
	var background sync.WaitGroup
	defer func() {
		cancel()
		background.Wait()
	}()

	r.setUp(ctx)
	r.arm(ctx)
	run := startFaultRun(ctx, t, r.c, r.wf, r.spec)
	r.note("started run %s on %s", r.wf, r.workers[0].name)
	t.Cleanup(func() {
		// A run left running would hand its tasks to the next run's
		// workers in this namespace.
		_ = r.c.TerminateWorkflow(context.Background(), r.wf, "", "chaos run over")
	})

	ended := make(chan struct{})
	var result workflows.RunResult
	var resultErr error
	background.Add(3)
	go func() {
		defer background.Done()
		defer close(ended)
		result, resultErr = chaosResult(ctx, run)
	}()
	go func() {
		defer background.Done()
		r.abortWhenWaiting(ctx, ended)
	}()
	go func() {
		defer background.Done()
		r.trackAttempts(ctx, ended)
	}()

	r.inject(ctx)
	r.wakePaused(ctx, ended)
	select {
	case <-ended:
	case <-ctx.Done():
	}
	endAt := time.Now()
	if !chanClosed(ended) {
		t.Errorf("%s: the run did not end within %s\n%s", cc.name(), r.limit(), r.workerLogs())
		return chaosOutcome{Case: cc, Takeover: -1, Err: "the run did not end in time"}
	}
	if resultErr != nil { // read only once ended is closed: the goroutine wrote it before
		t.Errorf("%s: %v\n%s", cc.name(), resultErr, r.workerLogs())
		return chaosOutcome{Case: cc, Takeover: -1, Err: resultErr.Error()}
	}
	r.note("the run ended %s: %s", result.Status, clip(result.Reason, 160))

	// A zombie is an attempt still alive after the run ended. None can live
	// past its own deadline (the attempt's context ends there, and with it
	// any request it could send), and every attempt alive at the end
	// started before it: so after the end plus one timeout nothing can
	// still arrive. A paused worker is given a few seconds after it wakes.
	settle := endAt.Add(cc.timeout() + 2*time.Second)
	if !r.wokeAt.IsZero() && r.wokeAt.Add(3*time.Second).After(settle) {
		settle = r.wokeAt.Add(3 * time.Second)
	}
	r.must(sleepCtx(ctx, time.Until(settle)))

	out := r.check(ctx, result)
	r.checkSpend(ctx, result, &out)
	r.report(out)
	return out
}

func chanClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// chaosResult waits for the run's result; a run that ended failed carries
// it in its error's details.
func chaosResult(ctx context.Context, run client.WorkflowRun) (workflows.RunResult, error) {
	var result workflows.RunResult
	err := run.Get(ctx, &result)
	var appErr *temporal.ApplicationError
	if err != nil && errors.As(err, &appErr) && appErr.Type() == workflows.ErrTypeRunFailed && appErr.HasDetails() {
		if appErr.Details(&result) == nil {
			return result, nil
		}
	}
	if err != nil {
		return result, fmt.Errorf("run %s: %w", run.GetID(), err)
	}
	return result, nil
}

// setUp gives the run its database, its payments service and its first
// worker.
func (r *chaosRun) setUp(ctx context.Context) {
	t := r.t
	r.c = r.env.temporal.client(t, r.env.namespace)
	var databaseURL string
	if r.cc.Fault == faultPostgres {
		r.pg = startPrivatePostgres(t)
		databaseURL = r.pg.url("agentsaga_chaos")
		r.must(ledger.EnsureDatabase(ctx, databaseURL))
	} else {
		databaseURL = agentsagatest.NewDatabase(t)
	}
	r.ledger = chaosLedger{url: databaseURL}
	r.tool = startChaosTool(t)
	r.spec = chaosSpec(t, r.cc, r.tool.URL)

	bob := "step-002-call-1-charge"
	r.faultActivity = bob
	if r.cc.Boundary == boundaryDuringWalk {
		r.faultActivity = bob + "/compensate"
	}
	r.faultKey = r.wf + "/" + r.faultActivity

	first := r.startWorker("worker-1")
	waitPolling(ctx, t, r.c, first) // it also applied the migrations
	r.setSpendCap(ctx)
}

// setSpendCap sets the cap of the runs' account as an operator would,
// before the run starts.
func (r *chaosRun) setSpendCap(ctx context.Context) {
	store, err := ledgerdb.Open(ctx, r.databaseURL())
	r.must(err)
	defer store.Close()
	c := r.cc.spendCap()
	if r.ledger.account != "" {
		c.Account = r.ledger.account
	}
	_, err = store.SetSpendCap(ctx, c, "chaos harness")
	r.must(err)
	r.note("set the spend cap of %s: $%.4f a %s, on_exhausted %s, finish_reserve %v (%s)", c.Account, c.USD, c.Period,
		c.OnExhausted, c.FinishReserve, r.cc.capMode())
}

func (r *chaosRun) databaseURL() string { return r.ledger.url }

func (r *chaosRun) startWorker(name string) *process {
	w := startWorkerProcess(r.t, r.env.bin, name, r.env.temporal.address(), r.env.namespace, r.databaseURL())
	r.workers = append(r.workers, w)
	return w
}

// chaosTools are the payments service's three endpoints. The refund finds
// its charge by the forward key, so it can undo a charge whose result the
// engine never learned.
const chaosTools = `
tools:
  - name: charge
    kind: http
    url: %[1]s/charge
    timeout_seconds: %[2]d
    parameters: {type: object, properties: {customer: {type: string}, amount: {type: number}}, required: [customer, amount]}
    compensate:
      tool: refund
      arguments: {charge_id: "{{result.id}}", forward_key: "{{key}}"}
  - name: refund
    kind: http
    url: %[1]s/refund
    timeout_seconds: %[2]d
  - name: ship
    kind: http
    url: %[1]s/ship
    timeout_seconds: %[2]d
    parameters: {type: object, properties: {order: {type: string}}, required: [order]}
`

func chaosSpec(t *testing.T, cc chaosCase, toolURL string) workflows.RunSpec {
	t.Helper()
	spec, err := workflows.ParseSpec([]byte(chaosSpecYAML(cc, toolURL)))
	if err != nil {
		t.Fatalf("chaos spec: %v", err)
	}
	return spec
}

// chaosSpecYAML is the case's spec as YAML, for the soak to vary.
func chaosSpecYAML(cc chaosCase, toolURL string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "goal: charge ann, bob and cat for order o-1, then ship it\nbudget: {steps: 10, account: %s}\n", chaosAccount)
	if !cc.DefaultRetry {
		b.WriteString("retry: {max_attempts: 5}\n")
	}
	fmt.Fprintf(&b, "prices: {models: {%s: {input_per_million: %v, output_per_million: %[2]v}}}\n", chaosModel, chaosUSDPerMillion)
	fmt.Fprintf(&b, `model:
  provider: scripted
  name: %s
  max_tokens: %d
  script:
`, chaosModel, chaosMaxTokens)
	b.WriteString(`    - tool_calls: [{name: charge, arguments: {customer: ann, amount: 10}}]
    - tool_calls: [{name: charge, arguments: {customer: bob, amount: 20}}]
    - tool_calls: [{name: charge, arguments: {customer: cat, amount: 30}}]
`)
	if cc.Ending == endingAbort {
		b.WriteString("    - tool_calls: [{name: ship, arguments: {order: o-1}}]\n")
	} else {
		b.WriteString("    - content: charged ann, bob and cat\n")
	}
	return b.String() + fmt.Sprintf(chaosTools, toolURL, cc.Timeout)
}

// arm sets the trap before the run starts: the placeholder row that blocks
// the claim, or the hold in the payments service.
func (r *chaosRun) arm(ctx context.Context) {
	var slow time.Duration
	if r.cc.Fault == faultSlow {
		slow = r.cc.timeout() + time.Second // past the attempt's deadline
	}
	switch r.cc.Boundary {
	case boundaryBeforeClaim:
		block, err := r.ledger.blockClaim(ctx, r.wf, r.faultActivity, r.faultKey)
		r.must(err)
		r.t.Cleanup(block.release)
		r.block = block
	case boundaryAdmitting:
		block, err := r.ledger.blockAdmission(ctx, chaosCapAccount)
		r.must(err)
		r.t.Cleanup(block.release)
		r.block = block
	case boundaryWaitingKey:
		r.hold = r.tool.hold(r.faultKey, holdAfterEffect, 0)
	case boundaryDuringEffect:
		r.hold = r.tool.hold(r.faultKey, holdBeforeEffect, slow)
	case boundaryAfterEffect, boundaryDuringWalk:
		r.hold = r.tool.hold(r.faultKey, holdAfterEffect, slow)
	}
}

func (r *chaosRun) inject(ctx context.Context) {
	switch r.cc.Boundary {
	case boundaryBeforeClaim:
		r.injectBeforeClaim(ctx)
	case boundaryWaitingKey:
		r.injectWaitingForKey(ctx)
	case boundaryAdmitting:
		r.injectAdmitting(ctx)
	default:
		r.injectInTool(ctx)
	}
}

// kill SIGKILLs the worker running the faulted attempt.
func (r *chaosRun) kill(w *process) {
	w.kill()
	r.faultAt = time.Now()
	if r.cc.Boundary == boundaryAdmitting {
		r.note("killed %s while it admitted the run", w.name)
		return
	}
	r.note("killed %s (attempt %d of %s)", w.name, r.faultAttempt, r.faultActivity)
}

// pause SIGSTOPs the worker running the faulted attempt; wakePaused wakes
// it.
func (r *chaosRun) pause(w *process) {
	r.must(w.pause())
	r.faultAt = time.Now()
	r.paused = w
	if r.cc.Boundary == boundaryAdmitting {
		r.note("paused %s while it admitted the run", w.name)
		return
	}
	r.note("paused %s (attempt %d of %s)", w.name, r.faultAttempt, r.faultActivity)
}

// restartPostgres stops the run's Postgres (ending every session, the
// harness's own locks included), calls during, and starts it again 2 s
// later.
func (r *chaosRun) restartPostgres(ctx context.Context, during func()) {
	r.must(r.pg.stop())
	r.faultAt = time.Now()
	r.note("stopped postgres")
	if during != nil {
		during()
	}
	r.must(sleepCtx(ctx, 2*time.Second))
	r.must(r.pg.start())
	r.note("started postgres again")
}

// waitForWaiter waits until a session waits for a lock that h holds: the
// claim the harness blocked.
func (r *chaosRun) waitForWaiter(ctx context.Context, h *sqlHold, what string) error {
	return pollUntil(ctx, what, 50*time.Millisecond, func() bool {
		n, err := r.ledger.waitersOn(ctx, h)
		return err == nil && n > 0
	})
}

func (r *chaosRun) injectBeforeClaim(ctx context.Context) {
	r.must(r.waitForWaiter(ctx, r.block, "worker-1's claim of "+r.faultKey+" to block on the placeholder row"))
	// The blocked session must be an attempt of the faulted activity that
	// Temporal gave worker-1, or the fault hits nothing I5 can measure.
	first := r.workers[0]
	var started startedAttempt
	startCtx, startCancel := context.WithTimeout(ctx, 10*time.Second)
	defer startCancel()
	r.must(pollUntil(startCtx, "Temporal to show "+r.faultActivity+" started on worker-1", 50*time.Millisecond, func() bool {
		a, ok, err := pendingAttempt(startCtx, r.c, r.wf, r.faultActivity)
		started = a
		return err == nil && ok && strings.HasPrefix(a.identity, fmt.Sprintf("%d@", first.pid()))
	}))
	r.faultAttempt = started.number
	r.note("worker-1's claim of %s (attempt %d) is blocked", r.faultActivity, r.faultAttempt)
	// Killed, the dead worker's session is still waiting: when the row
	// goes, it claims the key for an attempt that no longer exists. Paused,
	// its claim goes through while it sleeps; it learns of it when it wakes.
	r.strikeBlocked(ctx, first, "the claim")
}

// strikeBlocked does the case's fault to first, whose session waits on
// the harness's block, and lets the block go: at once after a kill or a
// pause (and worker-2 starts), after the heartbeat timeout and 2 s for a
// slow fault; a Postgres restart ends the block with every session.
func (r *chaosRun) strikeBlocked(ctx context.Context, first *process, what string) {
	switch r.cc.Fault {
	case faultKill, faultPause:
		if r.cc.Fault == faultKill {
			r.kill(first)
		} else {
			r.pause(first)
		}
		r.block.release()
		r.startWorker("worker-2")
	case faultPostgres:
		r.restartPostgres(ctx, nil)
	case faultSlow:
		r.must(sleepCtx(ctx, r.cc.heartbeatTimeout()+2*time.Second))
		r.block.release()
		r.note("let %s go after %s", what, r.cc.heartbeatTimeout()+2*time.Second)
	}
}

// injectAdmitting strikes worker-1 while its admission of the run waits
// for the queue's lock, then lets the lock go: the dead (or sleeping)
// worker's statement may still admit the run, and worker-2's asks again.
// The run must be admitted once, and its reservation given back once it
// ends (I7, I8).
func (r *chaosRun) injectAdmitting(ctx context.Context) {
	r.must(r.waitForWaiter(ctx, r.block, "worker-1's admission of "+r.wf+" to wait for the queue's lock"))
	first := r.workers[0]
	r.note("worker-1's admission of %s waits for the queue's lock", r.wf)
	r.strikeBlocked(ctx, first, "the queue's lock")
}

func (r *chaosRun) injectWaitingForKey(ctx context.Context) {
	r.must(r.hold.waitArrived(ctx))
	first := r.workers[0]
	first.kill() // not the measured fault: it leaves a dead attempt holding the key
	r.note("killed worker-1 while attempt %d of %s was inside the service (executed)", r.hold.attempt, r.faultActivity)
	lock, err := r.ledger.lockAction(ctx, r.faultKey)
	r.must(err)
	r.t.Cleanup(lock.release)
	r.hold.Release()
	second := r.startWorker("worker-2")
	prefix := fmt.Sprintf("%d@", second.pid())
	var attempt int
	r.must(pollUntil(ctx, "a later attempt of "+r.faultActivity+" to start on worker-2", 50*time.Millisecond, func() bool {
		a, ok, err := pendingAttempt(ctx, r.c, r.wf, r.faultActivity)
		if err == nil && ok && a.number > r.hold.attempt && strings.HasPrefix(a.identity, prefix) {
			attempt = a.number
			return true
		}
		return false
	}))
	// Its claim should now wait on the row lock; an engine whose claim
	// takes no row lock polls instead, which is waiting for the key too.
	lockCtx, lockCancel := context.WithTimeout(ctx, 2*time.Second)
	blocked := r.waitForWaiter(lockCtx, lock, "worker-2's claim to wait") == nil
	lockCancel()
	r.faultAttempt = attempt
	r.note("attempt %d of %s is waiting for the key on worker-2 (blocked on the row lock: %v)", attempt, r.faultActivity, blocked)
	if req, sent := r.tool.state().firstRequestAfter(r.faultKey, r.hold.attempt); sent {
		r.missed = fmt.Sprintf("attempt %d sent its request at %s, before the fault", req.Attempt, r.clock(req.At))
	}
	switch r.cc.Fault {
	case faultKill:
		r.kill(second)
		lock.release()
		r.startWorker("worker-3")
	case faultPause:
		r.pause(second)
		lock.release()
		r.startWorker("worker-3")
	case faultPostgres:
		r.restartPostgres(ctx, nil)
	case faultSlow:
		r.must(sleepCtx(ctx, r.cc.heartbeatTimeout()+2*time.Second))
		lock.release()
		r.note("released the row lock after %s", r.cc.heartbeatTimeout()+2*time.Second)
	}
}

func (r *chaosRun) injectInTool(ctx context.Context) {
	r.must(r.hold.waitArrived(ctx))
	r.faultAttempt = r.hold.attempt
	r.note("attempt %d of %s is held in the service", r.faultAttempt, r.faultActivity)
	first := r.workers[0]
	switch r.cc.Fault {
	case faultKill:
		// Not released: a request held before its effect is dropped when
		// its caller dies; one held after it just loses its caller.
		r.kill(first)
		r.startWorker("worker-2")
	case faultPause:
		// The effect (if still to come) happens now; the answer waits in
		// the paused worker's socket.
		r.pause(first)
		r.hold.Release()
		r.startWorker("worker-2")
	case faultPostgres:
		// The answer arrives while the ledger is down.
		r.restartPostgres(ctx, r.hold.Release)
	case faultSlow:
		// The hold ends by itself, after the attempt's deadline.
	}
}

// wakePaused sends SIGCONT to the paused worker once the run has ended,
// or once another attempt has taken over and the paused attempt's own
// deadline is near (waking it later would prove nothing: past its deadline
// its context is over and it can send nothing).
func (r *chaosRun) wakePaused(ctx context.Context, ended <-chan struct{}) {
	if r.paused == nil {
		return
	}
	near := r.faultAt.Add(r.cc.timeout() - 2*time.Second)
	why := ""
	for why == "" {
		select {
		case <-ended:
			why = "after the run ended"
		case <-ctx.Done():
			why = "at the run's time limit"
		case <-time.After(100 * time.Millisecond):
			if _, took := r.tool.state().firstRequestAfter(r.faultKey, r.faultAttempt); took && time.Now().After(near) {
				why = "after the takeover, near the paused attempt's deadline"
			}
		}
	}
	r.must(r.paused.resume())
	r.wokeAt = time.Now()
	r.note("woke %s %s, paused for %s", r.paused.name, why, r.wokeAt.Sub(r.faultAt).Round(time.Millisecond))
}

// trackAttempts records, until the run ends, which worker Temporal gave
// each attempt of the faulted activity to: a retry handed to a paused
// worker (whose long polls are still open) is lost until it times out, and
// the evidence of a slow takeover should say so.
func (r *chaosRun) trackAttempts(ctx context.Context, ended <-chan struct{}) {
	for {
		attempt, ok, err := pendingAttempt(ctx, r.c, r.wf, r.faultActivity)
		if err == nil && ok {
			r.mu.Lock()
			if r.seen == nil {
				r.seen = map[int]startedAttempt{}
			}
			r.seen[attempt.number] = attempt
			r.mu.Unlock()
		}
		select {
		case <-ended:
			return
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// attemptsSeen describes the attempts trackAttempts saw, and counts those
// handed to the paused worker while it was paused.
func (r *chaosRun) attemptsSeen() (text string, toPaused int) {
	r.mu.Lock()
	seen := make(map[int]startedAttempt, len(r.seen))
	for k, v := range r.seen {
		seen[k] = v
	}
	r.mu.Unlock()
	numbers := make([]int, 0, len(seen))
	for n := range seen {
		numbers = append(numbers, n)
	}
	sort.Ints(numbers)
	var parts []string
	for _, n := range numbers {
		a := seen[n]
		name := a.identity
		for _, w := range r.workers {
			if strings.HasPrefix(a.identity, fmt.Sprintf("%d@", w.pid())) {
				name = w.name
				if w == r.paused && n > r.faultAttempt && a.at.After(r.faultAt) && (r.wokeAt.IsZero() || a.at.Before(r.wokeAt)) {
					name += " (paused)"
					toPaused++
				}
			}
		}
		parts = append(parts, fmt.Sprintf("%d on %s from %s", n, name, r.clock(a.at)))
	}
	return strings.Join(parts, ", "), toPaused
}

// abortWhenWaiting plays the human: a run that escalated (the 403 of the
// abort ending, or anything unexpected) or waits on a failed compensation
// is aborted, so no run waits for a person who is not there.
func (r *chaosRun) abortWhenWaiting(ctx context.Context, ended <-chan struct{}) {
	for {
		select {
		case <-ended:
			return
		case <-ctx.Done():
			return
		case <-time.After(250 * time.Millisecond):
		}
		stored, err := r.ledger.run(ctx, r.wf)
		if err != nil || stored.FinishedAt != nil ||
			(stored.Status != agentsagatype.RunEscalated && stored.Status != agentsagatype.RunNeedsAttention) {
			continue
		}
		updateCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
		handle, err := r.c.UpdateWorkflow(updateCtx, client.UpdateWorkflowOptions{
			WorkflowID: r.wf, UpdateName: workflows.UpdateAbort, WaitForStage: client.WorkflowUpdateStageCompleted,
			Args: []any{workflows.ReasonInput{Reason: "chaos harness: abort"}},
		})
		if err == nil {
			var answer string
			err = handle.Get(updateCtx, &answer)
		}
		cancel()
		switch {
		case err == nil:
			r.note("aborted the run (it was %s)", stored.Status)
		case !isValidatorRefusal(err) && ctx.Err() == nil:
			r.note("abort while %s: %v", stored.Status, err)
		}
	}
}

// check reads what the run left in the ledger and at the service and
// counts the violations of I1-I5.
func (r *chaosRun) check(ctx context.Context, result workflows.RunResult) chaosOutcome {
	out := chaosOutcome{Case: r.cc, Missed: r.missed, Takeover: -1}
	stored, err := r.ledger.run(ctx, r.wf)
	if err != nil {
		out.Err = err.Error()
		return out
	}
	out.Status = stored.Status
	if stored.FinishedAt == nil {
		out.Err = fmt.Sprintf("the workflow ended %s but the ledger has no finished_at", result.Status)
		return out
	}
	end := *stored.FinishedAt
	actions, err := r.ledger.actions(ctx, r.wf)
	if err != nil {
		out.Err = err.Error()
		return out
	}
	st := r.tool.state()
	prefix := r.wf + "/"

	// I1: Postgres stores microseconds, so an arrival is compared at that
	// granularity and with no other slack: both clocks are this machine's.
	for _, req := range st.requests {
		if strings.HasPrefix(req.Key, prefix) && req.At.Truncate(time.Microsecond).After(end) {
			out.violate(1, "%s attempt %d arrived at %s, %s after the run ended (finished_at %s); the service %s it",
				req.Key, req.Attempt, r.clock(req.At), req.At.Sub(end).Round(time.Millisecond), r.clock(end), req.Outcome)
		}
	}

	// I2: which charges executed, from the service's own record.
	charged := map[string]chaosRequest{}
	for _, req := range st.requests {
		if req.Path == "/charge" && req.Outcome == outcomeExecuted && strings.HasPrefix(req.Key, prefix) {
			charged[req.Key] = req
		}
	}
	switch stored.Status {
	case agentsagatype.RunCompensated, agentsagatype.RunFailed, agentsagatype.RunNeedsAttention:
		named := stored.Reason + "\n" + result.Reason
		if result.Saga != nil {
			named += "\n" + strings.Join(result.Saga.Pending, "\n") + "\n" + strings.Join(result.Saga.Skipped, "\n")
		}
		for _, key := range sortedKeys(charged) {
			if st.refunds[key] > 0 {
				continue
			}
			if stored.Status == agentsagatype.RunNeedsAttention && strings.Contains(named, key) {
				continue
			}
			refund := "no refund request"
			for _, req := range st.requests {
				if req.Key == key+"/compensate" || strings.HasPrefix(req.Key, key+"/compensate/") {
					refund = fmt.Sprintf("refund %s attempt %d at %s: %s", req.Key, req.Attempt, r.clock(req.At), req.Outcome)
				}
			}
			out.violate(2, "the run ended %s but charge %s (attempt %d) executed at %s and was never refunded (%s; ledger: %s)",
				stored.Status, key, charged[key].Attempt, r.clock(charged[key].At), refund, actions[key].Status)
		}
	}

	// I3: what the model was told, against what the ledger knows.
	for _, entry := range result.Trace {
		if entry.Kind != "tool" || entry.Error == "" || entry.ActivityID == "" {
			continue
		}
		key := prefix + entry.ActivityID
		if action, ok := actions[key]; ok && action.Status == agentsagatype.ActionCompleted {
			completed := "?"
			if action.CompletedAt != nil {
				completed = r.clock(*action.CompletedAt)
			}
			out.violate(3, "the model was told %s failed (%q) but the ledger has it completed at %s (ledger attempts %d)",
				key, clip(entry.Error, 120), completed, action.Attempts)
		}
	}

	// I4: the service's executions per key.
	for _, key := range sortedKeys(st.executions) {
		if n := st.executions[key]; n > 1 && strings.HasPrefix(key, prefix) {
			for range n - 1 {
				out.violate(4, "%s executed %d times at the service", key, n)
			}
		}
	}

	// I5: from the kill or pause to the next attempt's request.
	seen, toPaused := r.attemptsSeen()
	out.ToPaused = toPaused
	// A fault while admitting strikes a workflow task, not an attempt of
	// a call: the run's takeover is the workflow task timeout's, which I5
	// does not bound.
	if (r.cc.Fault == faultKill || r.cc.Fault == faultPause) && r.missed == "" && r.cc.Boundary != boundaryAdmitting {
		limit := r.cc.heartbeatTimeout() + 5*time.Second
		next, ok := st.firstRequestAfter(r.faultKey, r.faultAttempt)
		switch {
		case !ok:
			out.violate(5, "after the %s of attempt %d of %s at %s, no later attempt ever reached the service (ledger: %s; Temporal's attempts: %s)",
				r.cc.Fault, r.faultAttempt, r.faultActivity, r.clock(r.faultAt), actions[r.faultKey].Status, seen)
		default:
			out.Takeover = next.At.Sub(r.faultAt)
			if out.Takeover > limit {
				out.violate(5, "attempt %d of %s reached the service %s after the %s of attempt %d (at %s), over the heartbeat timeout %s + 5 s (Temporal's attempts: %s)",
					next.Attempt, r.faultActivity, out.Takeover.Round(time.Millisecond), r.cc.Fault, r.faultAttempt,
					r.clock(r.faultAt), r.cc.heartbeatTimeout(), seen)
			}
		}
	}
	return out
}

// checkSpend counts the model turns the account's cap refused, ends the
// spend holds that outlived their leases, and counts the violations of I6
// and I7 on the account's caps. A hold's lease is its model turn's
// heartbeat timeout (min(2 min, 10 s)), set when the turn reserves and
// never renewed, so a hold its worker never settled (killed, paused, cut
// off from Postgres) keeps the cap's room until then, at most 10 s after
// the run's last turn began: the harness waits until the last hold left
// has passed its lease, calls ExpireSpendHolds as an operator's sweep
// would (a claimed turn's hold is spent in full, any other released), and
// only then reads the periods. The cost it compares them with is the
// run's completed model turns' reported usage at the spec's price, read
// from the turns the ledger stored.
func (r *chaosRun) checkSpend(ctx context.Context, result workflows.RunResult, out *chaosOutcome) {
	for _, entry := range result.Trace {
		if entry.Kind == "model" && entry.Denial == budget.DenySpendCap {
			out.Capped++
		}
	}
	fail := func(err error) {
		if out.Err != "" {
			out.Err += "; "
		}
		out.Err += "spend: " + err.Error()
	}
	until, err := r.ledger.spendLeaseEnd(ctx)
	if err != nil {
		fail(err)
		return
	}
	if until != nil {
		r.note("a spend hold is left, its lease until %s: waiting for it to pass", r.clock(*until))
		if err := sleepCtx(ctx, time.Until(*until)+500*time.Millisecond); err != nil {
			fail(fmt.Errorf("waiting for the spend holds' leases to pass: %w", err))
			return
		}
	}
	store, err := ledgerdb.Open(ctx, r.databaseURL())
	if err != nil {
		fail(err)
		return
	}
	spentInFull, released, err := store.ExpireSpendHolds(ctx)
	store.Close()
	if err != nil {
		fail(err)
		return
	}
	out.Expired = spentInFull + released
	if out.Expired > 0 {
		r.note("ExpireSpendHolds ended %d spend holds: %d spent in full, %d released", out.Expired, spentInFull, released)
	}
	caps, err := r.ledger.spendCaps(ctx)
	if err != nil {
		fail(err)
		return
	}
	periods, err := r.ledger.spendPeriods(ctx)
	if err != nil {
		fail(err)
		return
	}
	holds, err := r.ledger.spendHolds(ctx)
	if err != nil {
		fail(err)
		return
	}
	turns, usage, err := r.ledger.modelUsage(ctx, r.wf)
	if err != nil {
		fail(err)
		return
	}
	cost := (float64(usage.InputTokens) + float64(usage.OutputTokens)) * chaosUSDPerMillion / 1e6

	// I6: each period under its cap, and each cap's periods together at
	// least what the turns cost (a spend the ledger missed could pass the
	// cap unseen; more than they cost is a hold spent in full).
	spent := map[string]float64{}
	periodsOf := map[string]int{}
	for _, p := range periods {
		name := p.Account + " per " + p.Period
		spent[name] += p.Spent
		periodsOf[name]++
		if p.Spent > p.CapUSD+chaosSpendTolerance {
			out.violate(6, "the %s period of %s's cap from %s spent $%.6f of its $%.4f cap", p.Period, p.Account,
				p.Starts.UTC().Format(time.RFC3339), p.Spent, p.CapUSD)
		}
		// I7: nothing reserved once the holds have ended.
		if p.Reserved > chaosSpendTolerance || p.Reserved < -chaosSpendTolerance {
			out.violate(7, "the %s period of %s's cap from %s still holds $%.6f reserved", p.Period, p.Account,
				p.Starts.UTC().Format(time.RFC3339), p.Reserved)
		}
	}
	var book []string
	for _, c := range caps {
		name := c.Account + " per " + c.Period
		if spent[name] < cost-chaosSpendTolerance {
			out.violate(6, "%s's cap spent $%.6f in its periods, less than the $%.6f its %d model turns cost by their usage",
				name, spent[name], cost, turns)
		}
		book = append(book, fmt.Sprintf("%s: $%.6f spent of $%.4f in %d periods", name, spent[name], c.USD, periodsOf[name]))
		if r.cc.capMode() != capRoomy && out.Capped == 0 && periodsOf[name] <= 1 {
			out.CapMissed = fmt.Sprintf("the cap of %s was sized to refuse the fourth turn and refused none ($%.6f spent of $%.4f); the harness's cap no longer fits its runs' costs",
				name, spent[name], c.USD)
		}
	}
	for _, h := range holds {
		out.violate(7, "spend hold %s of $%.6f is left after ExpireSpendHolds, its lease until %s", h.Key, h.USD, r.clock(h.LeaseUntil))
	}
	admissions, err := r.ledger.runAdmissions(ctx, r.wf)
	if err != nil {
		fail(err)
		return
	}
	if len(admissions) != 1 {
		out.violate(8, "the run has %d admission rows, not 1", len(admissions))
	}
	for _, a := range admissions {
		if a.Status != "ended" || a.Held != 0 {
			out.violate(8, "the run's admission is %s and holds $%.6f after the run ended", a.Status, a.Held)
		}
	}
	r.note("spend (%s): %d model turns cost $%.6f by their usage; %s; %d turns refused by the cap", r.cc.capMode(), turns, cost,
		strings.Join(book, "; "), out.Capped)
}

// report logs the run's summary, and its violations as errors with the
// timeline they come from.
func (r *chaosRun) report(out chaosOutcome) {
	t := r.t
	st := r.tool.state()
	// The engine logs at WARN what it refused: a fenced claim, a write by
	// an attempt that lost its key. The paused worker's lines show what the
	// zombie tried when it woke.
	warnings, zombie := 0, ""
	for _, w := range r.workers {
		lines := r.warnings(w)
		warnings += len(lines)
		if w == r.paused && len(lines) > 0 {
			zombie = "\n  " + w.name + " (the paused worker) warned: " + strings.Join(lines[max(0, len(lines)-3):], "\n    ")
		}
	}
	requests, executions := 0, 0
	for _, req := range st.requests {
		if strings.HasPrefix(req.Key, r.wf+"/") {
			requests++
			if req.Outcome == outcomeExecuted {
				executions++
			}
		}
	}
	takeover := "n/a"
	if out.Takeover >= 0 {
		takeover = out.Takeover.Round(time.Millisecond).String()
	}
	r.mu.Lock()
	notes := strings.Join(r.notes, "\n  ")
	r.mu.Unlock()
	var timeline strings.Builder
	for _, req := range st.requests {
		fmt.Fprintf(&timeline, "\n  %s %s attempt %d %s: %s", r.clock(req.At), req.Path, req.Attempt,
			strings.TrimPrefix(req.Key, r.wf+"/"), req.Outcome)
	}
	seen, _ := r.attemptsSeen()
	t.Logf("%s: status=%s violations I1..I9=%v takeover=%s requests=%d executions=%d worker WARN lines=%d missed=%q cap refusals=%d holds expired=%d took %s\n  %s%s\nattempts of %s: %s\nservice timeline:%s",
		r.cc.name(), out.Status, out.Violations, takeover, requests, executions, warnings, out.Missed, out.Capped, out.Expired,
		time.Since(r.began).Round(time.Second), notes, zombie, r.faultActivity, seen, timeline.String())
	for _, e := range out.Evidence {
		if r.env.takeoverMeasured && strings.HasPrefix(e, "I5: ") {
			t.Logf("%s: measured, not enforced: %s", r.cc.name(), e)
			continue
		}
		t.Errorf("%s: %s", r.cc.name(), e)
	}
	if out.Err != "" {
		t.Errorf("%s: could not check the run: %s", r.cc.name(), out.Err)
	}
	if out.CapMissed != "" {
		t.Errorf("%s: %s", r.cc.name(), out.CapMissed)
	}
}

// warnings are the WARN lines a worker logged about this run.
func (r *chaosRun) warnings(w *process) []string {
	var lines []string
	for _, line := range strings.Split(w.fullLog(), "\n") {
		if strings.Contains(line, "WARN") && strings.Contains(line, r.wf) {
			lines = append(lines, clip(line, 240))
		}
	}
	return lines
}

func (r *chaosRun) workerLogs() string {
	var b strings.Builder
	for _, w := range r.workers {
		fmt.Fprintf(&b, "--- %s:\n%s\n", w.name, w.log())
	}
	return b.String()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// chaosTable is one row per cell of the plan (in the plan's order) and a
// total: runs, runs whose fault missed its boundary, runs that could not be
// checked, violations per invariant, the slowest takeover against its
// limit, the faulted call's attempts Temporal handed to a paused worker
// (each lost until its heartbeat timeout), the runs whose account's cap
// refused a turn, the spend holds ExpireSpendHolds ended after the runs,
// and how the runs ended.
func chaosTable(plan []chaosCase, outcomes []chaosOutcome) string {
	type row struct {
		cc                 chaosCase
		runs, missed, errs int
		toPaused           int
		capped, expired    int
		violations         [9]int
		worstTakeover      time.Duration
		measured           bool
		statuses           map[string]int
	}
	rows := map[string]*row{}
	var order []string
	for _, cc := range plan {
		if _, ok := rows[cc.row()]; !ok {
			rows[cc.row()] = &row{cc: cc, statuses: map[string]int{}}
			order = append(order, cc.row())
		}
	}
	total := row{statuses: map[string]int{}}
	for _, o := range outcomes {
		for _, rw := range []*row{rows[o.Case.row()], &total} {
			rw.runs++
			if o.Missed != "" {
				rw.missed++
			}
			if o.Err != "" {
				rw.errs++
			}
			rw.toPaused += o.ToPaused
			if o.Capped > 0 {
				rw.capped++
			}
			rw.expired += o.Expired
			for i, n := range o.Violations {
				rw.violations[i] += n
			}
			if o.Takeover >= 0 {
				rw.measured = true
				rw.worstTakeover = max(rw.worstTakeover, o.Takeover)
			}
			if o.Status != "" {
				rw.statuses[o.Status]++
			}
		}
	}
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "fault\tboundary\ttimeout\truns\tmissed\terrors\tI1\tI2\tI3\tI4\tI5\tI6\tI7\tI8\tI9\tworst takeover (limit)\tto paused\tcapped\tholds expired\tended\t")
	line := func(fault, boundary, timeout string, rw *row, limit string) {
		takeover := "-"
		if rw.measured {
			takeover = fmt.Sprintf("%.1fs", rw.worstTakeover.Seconds())
			if limit != "" {
				takeover += " (" + limit + ")"
			}
		}
		var ended []string
		for _, s := range sortedKeys(rw.statuses) {
			ended = append(ended, fmt.Sprintf("%s %d", s, rw.statuses[s]))
		}
		v := rw.violations
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%d\t%d\t%d\t%s\t\n", fault, boundary, timeout,
			rw.runs, rw.missed, rw.errs, v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], takeover, rw.toPaused, rw.capped, rw.expired,
			strings.Join(ended, ", "))
	}
	for _, key := range order {
		rw := rows[key]
		if rw.runs == 0 {
			continue // filtered out with -run
		}
		fault := string(rw.cc.Fault)
		if rw.cc.Label != "" {
			fault = rw.cc.Label + " (" + fault + ")"
		}
		limit := fmt.Sprintf("%.0fs", (rw.cc.heartbeatTimeout() + 5*time.Second).Seconds())
		line(fault, string(rw.cc.Boundary), fmt.Sprintf("%ds", rw.cc.Timeout), rw, limit)
	}
	line("total", "", "", &total, "")
	w.Flush()
	return b.String()
}
