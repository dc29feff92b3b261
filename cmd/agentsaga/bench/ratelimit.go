package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"golang.org/x/time/rate"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/agentsagatype"
)

// The rate-limit scenario (issue 22) asks what a fleet of K processes that
// share one API key gets out of the key's quota: how many of its requests
// the provider refuses, how much of the quota it turns into answers, and
// whether its runs survive. Each contender meets the same fake provider
// (ratelimitprovider.go) with the same limits, a fresh key each, so no
// contender inherits another's spent window.

// The contenders' names in the rows, and their short forms for --contenders.
const (
	RateLimitSDKContender            = "provider SDK retries"
	RateLimitPerProcessContender     = "limiter per process"
	RateLimitAgentsagaContender      = "agentsaga fleet limiter"
	RateLimitAgentsagaLearnContender = "agentsaga, limits learned"

	RateLimitSDK            = "sdk"
	RateLimitPerProcess     = "per-process"
	RateLimitAgentsaga      = "agentsaga"
	RateLimitAgentsagaLearn = "agentsaga-learned"
)

// RateLimitWorkerReady is what `agentsaga bench ratelimit-worker` prints
// once its worker polls.
const RateLimitWorkerReady = "ratelimit-worker: polling"

// rateLimitCountsLine starts the line a plain worker prints as it stops:
// what it sent and waited, as JSON.
const rateLimitCountsLine = "ratelimit-worker: counts "

// RateLimitKeyEnv is the environment variable every contender's processes
// read the API key from (the agentsaga spec's model.api_key_env).
const RateLimitKeyEnv = "AGENTSAGA_BENCH_RATELIMIT_KEY"

// rateLimitTool is the built-in Go tool (activities.Builtins) the model
// calls each turn but the last: no server, nothing to fail.
const rateLimitTool = "word_count"

// rateLimitToolSchema is its parameters.
const rateLimitToolSchema = `{"type":"object","properties":{"text":{"type":"string","description":"the text whose words to count"}},"required":["text"]}`

// rateLimitModel is the model every contender names.
const rateLimitModel = "bench-ratelimit"

// rateLimitSystem is every contender's system prompt, so that the requests
// are of a size on every side (agentsaga adds its budget note).
const rateLimitSystem = "You are a bench agent. Call word_count when asked to, then answer briefly."

// RateLimitConfig sizes the scenario.
type RateLimitConfig struct {
	Processes []int `json:"processes"`
	// Runs start together; each is Turns model turns (Turns-1 tool calls,
	// then the answer).
	Runs  int `json:"runs"`
	Turns int `json:"turns"`
	// The provider's limits on the one key, and what the agentsaga spec
	// declares.
	RequestsPerMinute int64 `json:"requests_per_minute"`
	TokensPerMinute   int64 `json:"tokens_per_minute"`
	// MaxTokens is every request's max_completion_tokens; a reply uses
	// CompletionTokens of it. GoalChars pads the goal so that tokens, not
	// requests, bind.
	MaxTokens        int64 `json:"max_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	GoalChars        int   `json:"goal_chars"`
	// The provider answers in LatencyMin..LatencyMax.
	providerLatency
	// Attempts is the Temporal retry policy's maximum attempts of a turn
	// on the plain sides (agentsaga's spec default is the same 3).
	Attempts int `json:"attempts"`
	// Runs still going at the Timeout are terminated and count as not
	// completed.
	contest

	ProcessScenario
}

// DefaultRateLimit is 24 runs of 6 turns on one key that allows 120
// requests and 24,000 tokens a minute: about 150 requests of some 450
// tokens, so the tokens bind, at about a minute and a half of quota past
// the first minute's burst per contender.
var DefaultRateLimit = RateLimitConfig{Processes: []int{2, 4}, Runs: 24, Turns: 6, RequestsPerMinute: 120, TokensPerMinute: 24_000,
	MaxTokens: 64, CompletionTokens: 48, GoalChars: 1200, providerLatency: providerLatency{LatencyMin: 50 * time.Millisecond, LatencyMax: 150 * time.Millisecond},
	Attempts: 3, contest: contest{Contenders: []string{RateLimitSDK, RateLimitPerProcess, RateLimitAgentsaga}, PoolMaxConns: 8, Timeout: 8 * time.Minute}}

// RateLimitRow is one contender on one process count.
type RateLimitRow struct {
	Contender string `json:"contender"`
	Processes int    `json:"processes"`
	// Provider is what the fake provider counted on the contender's key.
	Provider ProviderCounts `json:"provider"`
	// Share429 is the requests answered 429 over all requests.
	Share429 float64 `json:"share_429"`
	// TPM is the tokens the provider admitted over the window from the
	// first request to the last reply, per minute. QuotaShare is those
	// tokens over the most the key allows in that window: a full bucket
	// (one minute's limit) plus the refill, limit x window.
	TPM        float64 `json:"tokens_per_minute"`
	QuotaShare float64 `json:"quota_share"`
	RPM        float64 `json:"requests_per_minute"`
	Runs       int     `json:"runs"`
	Completed  int     `json:"runs_completed"`
	// Outcomes counts the runs' ends by status (agentsaga) or error.
	Outcomes map[string]int `json:"outcomes"`
	// WaitP50Ms and WaitP95Ms are a turn's wait for admission: from when
	// it was ready to be sent to when the request that succeeded was sent.
	// Turns is how many waits were measured.
	WaitP50Ms float64 `json:"wait_p50_ms"`
	WaitP95Ms float64 `json:"wait_p95_ms"`
	Turns     int     `json:"turns_measured"`
	// RetryTokens is, for agentsaga, the retry bucket's tokens granted
	// (retry_charges withdrawals granted); for the plain sides the
	// retried requests: the SDK's own and every request of a Temporal
	// retry.
	RetryTokens int64 `json:"retry_tokens"`
	// Seconds is from the first start to the last run's end; Ideal is
	// RateLimitIdealSeconds.
	Seconds float64 `json:"seconds"`
	Ideal   float64 `json:"ideal_seconds"`
	// Quota is the ledger's row for the key, agentsaga only.
	Quota map[string]any `json:"quota,omitempty"`
}

// RateLimitResult is the scenario's figures.
type RateLimitResult struct {
	Config RateLimitConfig `json:"config"`
	Server string          `json:"server"`
	Rows   []RateLimitRow  `json:"rows"`
}

// Targets for the agentsaga rows (issue 22).
const (
	RateLimitMax429Share      = 0.01
	RateLimitMinQuotaShare    = 0.85
	RateLimitMaxRetryTokens   = 0
	rateLimitMeasurementLabel = "bench: ratelimit"
)

// RateLimitVerdicts says, for an agentsaga row, which targets it met.
func RateLimitVerdicts(r RateLimitRow) (share429, quota, completed, retries bool) {
	return r.Share429 < RateLimitMax429Share, r.QuotaShare >= RateLimitMinQuotaShare, r.Completed == r.Runs, r.RetryTokens <= RateLimitMaxRetryTokens
}

func (cfg RateLimitConfig) validate() error {
	if cfg.Runs < 1 || cfg.Turns < 1 || cfg.RequestsPerMinute < 1 || cfg.TokensPerMinute < 1 || len(cfg.Processes) == 0 ||
		cfg.Attempts < 1 || cfg.PoolMaxConns < 1 || cfg.Timeout <= 0 || cfg.MaxTokens < 1 || cfg.GoalChars < 0 {
		return fmt.Errorf("%s: runs %d, turns %d, limits %d RPM and %d TPM, processes %v, attempts %d, pool %d, timeout %v and max tokens %d must be positive",
			rateLimitMeasurementLabel, cfg.Runs, cfg.Turns, cfg.RequestsPerMinute, cfg.TokensPerMinute, cfg.Processes, cfg.Attempts, cfg.PoolMaxConns, cfg.Timeout, cfg.MaxTokens)
	}
	return cfg.contest.validate(rateLimitMeasurementLabel, rateLimitContenderNames, cfg.Processes...)
}

var rateLimitContenderNames = map[string]string{
	RateLimitSDK: RateLimitSDKContender, RateLimitPerProcess: RateLimitPerProcessContender,
	RateLimitAgentsaga: RateLimitAgentsagaContender, RateLimitAgentsagaLearn: RateLimitAgentsagaLearnContender,
}

// RateLimit runs each contender on each process count against a fake
// provider, on a dev server in memory started from cfg.TemporalBin, with
// worker processes of cfg.Executable.
func RateLimit(ctx context.Context, cfg RateLimitConfig) (RateLimitResult, error) {
	result := RateLimitResult{Config: cfg, Server: "dev server in memory (no --db-filename)"}
	return inScratchDir(rateLimitMeasurementLabel, "ratelimit", cfg.validate(), result, func(dir string, result *RateLimitResult) error {
		var db *benchDatabase
		if slices.Contains(cfg.Contenders, RateLimitAgentsaga) || slices.Contains(cfg.Contenders, RateLimitAgentsagaLearn) {
			var err error
			if db, err = newBenchDatabase(ctx, cfg.DatabaseURL); err != nil {
				return err
			}
			defer db.drop()
		}
		server, err := startBenchServer(ctx, cfg.TemporalBin, dir, serverOptions{})
		if err != nil {
			return fmt.Errorf("%s: %w", rateLimitMeasurementLabel, err)
		}
		defer server.stop()
		m := rateLimitMeasurement{cfg: cfg, c: server.c, db: db, dir: dir, server: server}
		for _, n := range cfg.Processes {
			for _, contender := range cfg.Contenders {
				row, err := m.measure(ctx, contender, n)
				if err != nil {
					return err
				}
				result.Rows = append(result.Rows, row)
			}
		}
		return nil
	})
}

type rateLimitMeasurement struct {
	cfg    RateLimitConfig
	c      client.Client
	db     *benchDatabase
	dir    string
	server *benchServer
}

// rateLimitRun is one run started: how to wait for its end, which returns
// its outcome ("completed" or what else), and how to stop it.
type rateLimitRun struct {
	id   string
	wait func(context.Context) string
}

func (m rateLimitMeasurement) measure(ctx context.Context, contender string, processes int) (RateLimitRow, error) {
	cfg := m.cfg
	row := RateLimitRow{Contender: rateLimitContenderNames[contender], Processes: processes, Runs: cfg.Runs, Outcomes: map[string]int{}}
	label := fmt.Sprintf("%d processes, %s", processes, row.Contender)
	prefix := fmt.Sprintf("ratelimit-%s-%d-%s", contender, processes, nonce())
	provider, err := StartRateLimitProvider(ProviderConfig{RequestsPerMinute: cfg.RequestsPerMinute, TokensPerMinute: cfg.TokensPerMinute,
		Turns: cfg.Turns, Tool: rateLimitTool, CompletionTokens: cfg.CompletionTokens, providerLatency: cfg.providerLatency})
	if err != nil {
		return row, err
	}
	defer provider.Close()
	apiKey := "sk-bench-" + nonce() + nonce()
	env := m.server.workerEnv(RateLimitKeyEnv + "=" + apiKey)

	var args []string
	ready := RateLimitWorkerReady
	queue := "bench-ratelimit-" + nonce()
	agentsagaSide := contender == RateLimitAgentsaga || contender == RateLimitAgentsagaLearn
	switch contender {
	case RateLimitSDK:
		args = []string{"bench", "ratelimit-worker", "--task-queue", queue}
	case RateLimitPerProcess:
		// Each process is given the whole limit, as a proxy replica is.
		args = []string{"bench", "ratelimit-worker", "--task-queue", queue,
			"--rpm", strconv.FormatInt(cfg.RequestsPerMinute, 10), "--tpm", strconv.FormatInt(cfg.TokensPerMinute, 10)}
	default:
		args, ready = []string{"worker", "--retention", "-1s"}, "agentsaga worker running"
		env = append(env, "DATABASE_URL="+m.db.workerURL(cfg.PoolMaxConns))
	}
	procs, err := startWorkerProcesses(ctx, cfg.Executable, args, env, filepath.Join(m.dir, prefix), processes, ready)
	defer func() { _ = procs.stop() }()
	if err != nil {
		return row, fmt.Errorf("%s: %s: %w", rateLimitMeasurementLabel, label, err)
	}

	var start func(ctx context.Context, id string) (rateLimitRun, error)
	if agentsagaSide {
		spec, err := RateLimitSpec(cfg, provider.URL(), contender == RateLimitAgentsaga)
		if err != nil {
			return row, err
		}
		start = func(ctx context.Context, id string) (rateLimitRun, error) {
			// Every ID carries a fresh nonce, in a database the bench made
			// for itself; a ledger round trip per start would sit in the
			// measured path.
			run, err := agentsaga.Start(ctx, m.c, id, spec, agentsaga.StartOptions{SkipLedgerCheck: true})
			if err != nil {
				return rateLimitRun{}, fmt.Errorf("%s: start %s: %w", rateLimitMeasurementLabel, id, err)
			}
			return rateLimitRun{id: id, wait: func(ctx context.Context) string {
				result, err := run.Result(ctx)
				switch {
				case result.Status != "":
					return result.Status
				case err != nil:
					return outcomeOf(err)
				}
				return "unknown"
			}}, nil
		}
	} else {
		in := rateLimitPlainInput(cfg, provider.URL())
		start = func(ctx context.Context, id string) (rateLimitRun, error) {
			run, err := m.c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue}, RateLimitPlainWorkflow, in)
			if err != nil {
				return rateLimitRun{}, fmt.Errorf("%s: start %s: %w", rateLimitMeasurementLabel, id, err)
			}
			return rateLimitRun{id: id, wait: func(ctx context.Context) string {
				if err := run.Get(ctx, nil); err != nil {
					return outcomeOf(err)
				}
				return agentsagatype.RunCompleted
			}}, nil
		}
	}

	runCtx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	began := time.Now()
	runs := make([]rateLimitRun, cfg.Runs)
	for i, id := range runIDs(prefix, cfg.Runs) {
		if runs[i], err = start(runCtx, id); err != nil {
			return row, err
		}
	}
	outcomes := make([]string, cfg.Runs)
	ended := make([]time.Time, cfg.Runs)
	var wg sync.WaitGroup
	for i, run := range runs {
		wg.Go(func() {
			outcomes[i], ended[i] = run.wait(runCtx), time.Now()
			if outcomes[i] != agentsagatype.RunCompleted && runCtx.Err() != nil {
				outcomes[i] = "timed out"
			}
		})
	}
	wg.Wait()
	row.Seconds = slices.MaxFunc(ended, func(a, b time.Time) int { return a.Compare(b) }).Sub(began).Seconds()
	if runCtx.Err() != nil {
		// Runs the timeout cut off: stopped, so that the processes can stop.
		stopCtx, stopCancel := context.WithTimeout(ctx, 30*time.Second)
		for i, run := range runs {
			if outcomes[i] == "timed out" {
				_ = m.c.TerminateWorkflow(stopCtx, run.id, "", "the bench's timeout")
			}
		}
		stopCancel()
	}
	for _, o := range outcomes {
		row.Outcomes[o]++
	}
	row.Completed = row.Outcomes[agentsagatype.RunCompleted]

	var waits []float64
	if agentsagaSide {
		ids := make([]string, len(runs))
		for i, run := range runs {
			ids[i] = run.id
		}
		if waits, err = modelTurnWaits(ctx, m.c, ids); err != nil {
			return row, err
		}
		if row.RetryTokens, err = m.db.retryTokens(ctx, prefix); err != nil {
			return row, err
		}
		row.Quota, _ = m.db.quotaRow(ctx, agentsagatype.ProviderOpenAI+":"+rateLimitModel+":")
	}
	for _, p := range procs {
		if err := p.stop(); err != nil {
			return row, fmt.Errorf("%s: %s: %w", rateLimitMeasurementLabel, label, err)
		}
	}
	if !agentsagaSide {
		counts, err := readPlainCounts(procs)
		if err != nil {
			return row, fmt.Errorf("%s: %s: %w", rateLimitMeasurementLabel, label, err)
		}
		waits, row.RetryTokens = counts.WaitsMs, counts.Requests-counts.FirstTries
	}
	row.Turns = len(waits)
	row.WaitP50Ms, row.WaitP95Ms = quantile(waits, 0.50), quantile(waits, 0.95)

	row.Provider = provider.Counts(apiKey)
	row.Share429 = row.Provider.Share429()
	if window := row.Provider.Last.Sub(row.Provider.First).Seconds(); window > 0 {
		row.TPM = float64(row.Provider.TokensAdmitted) / window * 60
		row.RPM = float64(row.Provider.Answered) / window * 60
		row.QuotaShare = float64(row.Provider.TokensAdmitted) / (float64(cfg.TokensPerMinute) * (1 + window/60))
	}
	row.Ideal = RateLimitIdealSeconds(cfg, row.Provider)
	if cfg.Progress != nil {
		fmt.Fprintf(cfg.Progress, "ratelimit: %s: %d of %d runs completed in %.1f s (ideal %.1f s); %d requests, %.1f%% answered 429; %.0f tokens/min (%.0f%% of the quota)\n",
			label, row.Completed, row.Runs, row.Seconds, row.Ideal, row.Provider.Requests, 100*row.Share429, row.TPM, 100*row.QuotaShare)
	}
	return row, nil
}

// RateLimitIdealSeconds is the least time the quota allows for every run's
// turns (runs x turns requests, each of the mean size of the requests the
// provider answered): the tokens and the requests past a full bucket, at
// the refill rate; or, if longer, a run's own turns one after another at
// the provider's mean latency.
func RateLimitIdealSeconds(cfg RateLimitConfig, c ProviderCounts) float64 {
	need := float64(cfg.Runs * cfg.Turns)
	perRequest := 0.0
	if c.Answered > 0 {
		perRequest = float64(c.TokensAdmitted) / float64(c.Answered)
	}
	tokens := (need*perRequest - float64(cfg.TokensPerMinute)) / (float64(cfg.TokensPerMinute) / 60)
	requests := (need - float64(cfg.RequestsPerMinute)) / (float64(cfg.RequestsPerMinute) / 60)
	chain := float64(cfg.Turns) * (cfg.LatencyMin + cfg.LatencyMax).Seconds() / 2
	return max(tokens, requests, chain, 0)
}

// outcomeOf names how a run that did not complete ended.
func outcomeOf(err error) string {
	var timeout *temporal.TimeoutError
	var canceled *temporal.CanceledError
	var terminated *temporal.TerminatedError
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timed out"
	case errors.As(err, &terminated):
		return "terminated"
	case errors.As(err, &canceled):
		return "cancelled"
	case errors.As(err, &timeout):
		return "workflow timeout"
	}
	var failed *agentsaga.RunFailedError
	if errors.As(err, &failed) {
		return failed.Result.Status
	}
	return "failed"
}

// modelStep reads a model turn's activity ID: step-003-model, its parked
// and fallback forms (step-003-model/...), and the graceful finish.
var modelStep = regexp.MustCompile(`^step-(\d+)-(model|finish)`)

// modelTurnWaits reads each run's history for its model turns' waits for
// admission: from the first ActivityTaskScheduled of the turn to the
// ActivityTaskStarted of the attempt that completed it (Temporal writes a
// retried activity's started event once, for its last attempt).
func modelTurnWaits(ctx context.Context, c client.Client, ids []string) ([]float64, error) {
	var waits []float64
	for _, id := range ids {
		first := map[string]time.Time{}
		step := map[int64]string{}
		started := map[int64]time.Time{}
		iter := c.GetWorkflowHistory(ctx, id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for iter.HasNext() {
			event, err := iter.Next()
			if err != nil {
				return nil, fmt.Errorf("%s: history of %s: %w", rateLimitMeasurementLabel, id, err)
			}
			at := event.GetEventTime().AsTime()
			switch {
			case event.GetActivityTaskScheduledEventAttributes() != nil:
				match := modelStep.FindStringSubmatch(event.GetActivityTaskScheduledEventAttributes().GetActivityId())
				if match == nil {
					continue
				}
				step[event.GetEventId()] = match[1]
				if _, ok := first[match[1]]; !ok {
					first[match[1]] = at
				}
			case event.GetActivityTaskStartedEventAttributes() != nil:
				started[event.GetActivityTaskStartedEventAttributes().GetScheduledEventId()] = at
			case event.GetActivityTaskCompletedEventAttributes() != nil:
				scheduled := event.GetActivityTaskCompletedEventAttributes().GetScheduledEventId()
				if s, ok := step[scheduled]; ok {
					waits = append(waits, float64(started[scheduled].Sub(first[s]).Microseconds())/1000)
				}
			}
		}
	}
	return waits, nil
}

// retryTokens counts the retry bucket's withdrawals granted to the runs
// whose workflow IDs start with prefix (a charge's key is workflow ID /
// activity ID / attempt).
func (db *benchDatabase) retryTokens(ctx context.Context, prefix string) (int64, error) {
	conn, err := pgx.Connect(ctx, db.url)
	if err != nil {
		return 0, fmt.Errorf("%s: read retry charges: %w", rateLimitMeasurementLabel, err)
	}
	defer conn.Close(ctx)
	var n int64
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM retry_charges WHERE kind = 'withdraw' AND decision = 'granted' AND starts_with(charge_key, $1)`,
		prefix+"-").Scan(&n); err != nil {
		return 0, fmt.Errorf("%s: read retry charges: %w", rateLimitMeasurementLabel, err)
	}
	return n, nil
}

// quotaRow is the ledger's quota row of the measurement's key, as JSON,
// for the saved figures: whatever columns the engine keeps there. A quota
// is named provider:model: and a fingerprint of the API key (agentsaga
// show prints the names); of the rows of the model (prefix, which ends
// with ":"), the
// measurement's is the one updated last: each measurement has a key of
// its own, and the earlier measurements' workers have stopped.
func (db *benchDatabase) quotaRow(ctx context.Context, prefix string) (map[string]any, error) {
	conn, err := pgx.Connect(ctx, db.url)
	if err != nil {
		return nil, fmt.Errorf("bench: quota row: %w", err)
	}
	defer conn.Close(ctx)
	var row map[string]any
	err = conn.QueryRow(ctx, `SELECT to_jsonb(q) FROM quota_limits q WHERE starts_with(key, $1) ORDER BY updated_at DESC LIMIT 1`, prefix).Scan(&row)
	if err != nil {
		return nil, fmt.Errorf("bench: quota row of %s*: %w", prefix, err)
	}
	return row, nil
}

// RateLimitSpec is the agentsaga side's run: the openai provider at url,
// the key from RateLimitKeyEnv, the built-in word_count tool, and, when
// declare, the provider's limits as model.rate_limit.
func RateLimitSpec(cfg RateLimitConfig, url string, declare bool) (agentsaga.RunSpec, error) {
	limit := ""
	if declare {
		limit = fmt.Sprintf("\n  rate_limit: {requests_per_minute: %d, tokens_per_minute: %d}", cfg.RequestsPerMinute, cfg.TokensPerMinute)
	}
	return parseRunSpec(rateLimitMeasurementLabel, fmt.Sprintf(`
goal: %q
system: %q
budget: {steps: %d, seconds: %d}
model:
  provider: openai
  name: %s
  base_url: %q
  api_key_env: %s
  max_tokens: %d%s
%s`, rateLimitGoal(cfg.GoalChars), rateLimitSystem, 2*cfg.Turns+2, int((3*cfg.Timeout).Seconds()), rateLimitModel, url, RateLimitKeyEnv, cfg.MaxTokens, limit,
		wordCountTool))
}

// rateLimitGoal is a goal of about chars characters: an instruction and a
// report to read, so that a request's tokens bind before its count.
func rateLimitGoal(chars int) string {
	return wordCountGoal(chars, "The report follows. ", "Line %d of the report says that the quarterly figures were filed on time and checked twice. ")
}

// wordCountGoal is a goal of about chars characters for the word_count
// scenarios: the instruction and heading, then numbered lines (line, with
// the line's number) to fill it.
func wordCountGoal(chars int, heading, line string) string {
	var b strings.Builder
	b.WriteString("Count the words of the sentences you are given, one word_count call a turn, then answer. " + heading)
	for i := 0; b.Len() < chars; i++ {
		fmt.Fprintf(&b, line, i+1)
	}
	return b.String()
}

// RateLimitPlainInput is one run of RateLimitPlainWorkflow.
type RateLimitPlainInput struct {
	BaseURL   string `json:"base_url"`
	Model     string `json:"model"`
	APIKeyEnv string `json:"api_key_env"`
	MaxTokens int64  `json:"max_tokens"`
	System    string `json:"system"`
	Goal      string `json:"goal"`
	MaxTurns  int    `json:"max_turns"`
	// The turn activity's retry policy: agentsaga's defaults for a call.
	InitialInterval time.Duration `json:"initial_interval"`
	MaximumInterval time.Duration `json:"maximum_interval"`
	MaximumAttempts int32         `json:"maximum_attempts"`
}

func rateLimitPlainInput(cfg RateLimitConfig, url string) RateLimitPlainInput {
	return RateLimitPlainInput{BaseURL: url, Model: rateLimitModel, APIKeyEnv: RateLimitKeyEnv, MaxTokens: cfg.MaxTokens,
		System: rateLimitSystem, Goal: rateLimitGoal(cfg.GoalChars), MaxTurns: 2*cfg.Turns + 2,
		InitialInterval: 500 * time.Millisecond, MaximumInterval: 8 * time.Second, MaximumAttempts: int32(cfg.Attempts)}
}

// RateLimitMessage is a plain run's conversation entry.
type RateLimitMessage struct {
	Role       string             `json:"role"`
	Content    string             `json:"content,omitempty"`
	ToolCallID string             `json:"tool_call_id,omitempty"`
	ToolCall   *RateLimitToolCall `json:"tool_call,omitempty"`
}

// RateLimitToolCall is the model's call of the tool.
type RateLimitToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// RateLimitTurnInput is one model turn of a plain run. ReadyAt is when the
// workflow decided to send it, kept across the activity's retries.
type RateLimitTurnInput struct {
	BaseURL   string             `json:"base_url"`
	Model     string             `json:"model"`
	APIKeyEnv string             `json:"api_key_env"`
	MaxTokens int64              `json:"max_tokens"`
	Messages  []RateLimitMessage `json:"messages"`
	ReadyAt   time.Time          `json:"ready_at"`
}

// RateLimitTurnActivity is the plain turn's activity name.
const RateLimitTurnActivity = "RateLimitTurn"

// RateLimitPlainWorkflow is what a team without agentsaga writes: a loop
// of model turns, each one activity with a Temporal retry policy, the tool
// (word_count) run inline, the run failing when a turn does.
func RateLimitPlainWorkflow(ctx workflow.Context, in RateLimitPlainInput) error {
	messages := []RateLimitMessage{{Role: "system", Content: in.System}, {Role: "user", Content: in.Goal}}
	for turn := 1; turn <= in.MaxTurns; turn++ {
		actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{ActivityID: fmt.Sprintf("turn-%03d", turn),
			StartToCloseTimeout: 5 * time.Minute,
			RetryPolicy: &temporal.RetryPolicy{InitialInterval: in.InitialInterval, BackoffCoefficient: 2,
				MaximumInterval: in.MaximumInterval, MaximumAttempts: in.MaximumAttempts}})
		var reply RateLimitMessage
		err := workflow.ExecuteActivity(actx, RateLimitTurnActivity, RateLimitTurnInput{BaseURL: in.BaseURL, Model: in.Model, APIKeyEnv: in.APIKeyEnv,
			MaxTokens: in.MaxTokens, Messages: messages, ReadyAt: workflow.Now(ctx)}).Get(ctx, &reply)
		if err != nil {
			return fmt.Errorf("turn %d: %w", turn, err)
		}
		if reply.ToolCall == nil {
			return nil
		}
		var args struct {
			Text string `json:"text"`
		}
		_ = json.Unmarshal([]byte(reply.ToolCall.Arguments), &args)
		messages = append(messages, reply,
			RateLimitMessage{Role: "tool", ToolCallID: reply.ToolCall.ID, Content: fmt.Sprintf(`{"words": %d}`, len(strings.Fields(args.Text)))})
	}
	return fmt.Errorf("no answer after %d turns", in.MaxTurns)
}

// rateLimitCounts is what one plain process sent and waited.
type rateLimitCounts struct {
	// Requests are every HTTP request sent; FirstTries the first request
	// of each turn (its activity's first attempt). The rest are retries.
	Requests   int64     `json:"requests"`
	FirstTries int64     `json:"first_tries"`
	Status429  int64     `json:"status_429"`
	WaitsMs    []float64 `json:"waits_ms"`
}

// rateLimitTurns is a plain process's turn activity: openai-go with its
// default retries (2, honouring retry-after-ms), and, when limited, a
// golang.org/x/time/rate limiter for requests and one for tokens in front
// of every request it sends.
type rateLimitTurns struct {
	requests, tokens *rate.Limiter

	mu     sync.Mutex
	counts rateLimitCounts
}

func (a *rateLimitTurns) Turn(ctx context.Context, in RateLimitTurnInput) (RateLimitMessage, error) {
	attempt := activity.GetInfo(ctx).Attempt
	params := openai.ChatCompletionNewParams{Model: shared.ChatModel(in.Model), MaxCompletionTokens: openai.Int(in.MaxTokens)}
	var schema shared.FunctionParameters
	if err := json.Unmarshal([]byte(rateLimitToolSchema), &schema); err != nil {
		return RateLimitMessage{}, fmt.Errorf("ratelimit turn: tool schema: %w", err)
	}
	params.Tools = []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
		Name: rateLimitTool, Description: openai.String("Count the words in a text."), Parameters: schema})}
	texts := make([]string, 0, len(in.Messages))
	for _, m := range in.Messages {
		texts = append(texts, m.Content)
		switch {
		case m.Role == "system":
			params.Messages = append(params.Messages, openai.SystemMessage(m.Content))
		case m.Role == "user":
			params.Messages = append(params.Messages, openai.UserMessage(m.Content))
		case m.Role == "tool":
			params.Messages = append(params.Messages, openai.ToolMessage(m.Content, m.ToolCallID))
		case m.ToolCall != nil:
			texts[len(texts)-1] += m.ToolCall.Name + m.ToolCall.Arguments
			params.Messages = append(params.Messages, openai.ChatCompletionMessageParamUnion{OfAssistant: &openai.ChatCompletionAssistantMessageParam{
				ToolCalls: []openai.ChatCompletionMessageToolCallUnionParam{{OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
					ID: m.ToolCall.ID, Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: m.ToolCall.Name, Arguments: m.ToolCall.Arguments}}}}}})
		default:
			params.Messages = append(params.Messages, openai.AssistantMessage(m.Content))
		}
	}
	tool, _ := json.Marshal(params.Tools[0])
	estimate := int(ProviderPromptTokens(texts, []json.RawMessage{tool}) + in.MaxTokens)

	sent, succeeded := 0, time.Time{}
	middleware := func(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		if a.requests != nil {
			if err := a.requests.Wait(req.Context()); err != nil {
				return nil, fmt.Errorf("ratelimit turn: request limiter: %w", err)
			}
			if err := a.tokens.WaitN(req.Context(), min(estimate, a.tokens.Burst())); err != nil {
				return nil, fmt.Errorf("ratelimit turn: token limiter: %w", err)
			}
		}
		sent++
		at := time.Now()
		resp, err := next(req)
		a.mu.Lock()
		a.counts.Requests++
		if sent == 1 && attempt == 1 {
			a.counts.FirstTries++
		}
		if err == nil && resp.StatusCode == http.StatusTooManyRequests {
			a.counts.Status429++
		}
		a.mu.Unlock()
		if err == nil && resp.StatusCode < 300 {
			succeeded = at
		}
		return resp, err
	}
	c := openai.NewClient(option.WithBaseURL(in.BaseURL), option.WithAPIKey(os.Getenv(in.APIKeyEnv)), option.WithMiddleware(middleware))
	resp, err := c.Chat.Completions.New(ctx, params)
	if err != nil {
		return RateLimitMessage{}, fmt.Errorf("ratelimit turn: chat.completions: %w", err)
	}
	if len(resp.Choices) == 0 {
		return RateLimitMessage{}, fmt.Errorf("ratelimit turn: chat.completions: no choices")
	}
	a.mu.Lock()
	a.counts.WaitsMs = append(a.counts.WaitsMs, float64(succeeded.Sub(in.ReadyAt).Microseconds())/1000)
	a.mu.Unlock()
	msg := resp.Choices[0].Message
	reply := RateLimitMessage{Role: "assistant", Content: msg.Content}
	if len(msg.ToolCalls) > 0 {
		call := msg.ToolCalls[0]
		reply.ToolCall = &RateLimitToolCall{ID: call.ID, Name: call.Function.Name, Arguments: call.Function.Arguments}
	}
	return reply, nil
}

// RunRateLimitPlainWorker is one process of a plain contender (`agentsaga
// bench ratelimit-worker`): a worker with the SDK's default options and,
// when rpm and tpm are positive, a limiter of its own given the whole
// limit. As ctx ends it prints its counts for the harness.
func RunRateLimitPlainWorker(ctx context.Context, out io.Writer, c client.Client, queue string, rpm, tpm int64) error {
	turns := &rateLimitTurns{}
	if rpm > 0 && tpm > 0 {
		turns.requests = rate.NewLimiter(rate.Limit(float64(rpm)/60), int(rpm))
		turns.tokens = rate.NewLimiter(rate.Limit(float64(tpm)/60), int(tpm))
	}
	w := sdkworker.New(c, queue, sdkworker.Options{})
	w.RegisterWorkflow(RateLimitPlainWorkflow)
	w.RegisterActivityWithOptions(turns.Turn, activity.RegisterOptions{Name: RateLimitTurnActivity})
	if err := w.Start(); err != nil {
		return fmt.Errorf("bench: ratelimit-worker: start on task queue %q: %w", queue, err)
	}
	fmt.Fprintf(out, "%s task queue %q\n", RateLimitWorkerReady, queue)
	<-ctx.Done()
	w.Stop()
	turns.mu.Lock()
	defer turns.mu.Unlock()
	data, err := json.Marshal(turns.counts)
	if err != nil {
		return fmt.Errorf("bench: ratelimit-worker: counts: %w", err)
	}
	fmt.Fprintf(out, "%s%s\n", rateLimitCountsLine, data)
	return nil
}

// readPlainCounts sums the counts the stopped plain processes printed.
func readPlainCounts(procs []*benchProcess) (rateLimitCounts, error) {
	var sum rateLimitCounts
	for _, p := range procs {
		f, err := os.Open(p.log)
		if err != nil {
			return sum, fmt.Errorf("read worker log: %w", err)
		}
		found := false
		scanner := bufio.NewScanner(f)
		scanner.Buffer(make([]byte, 1<<20), 16<<20)
		for scanner.Scan() {
			data, ok := strings.CutPrefix(scanner.Text(), rateLimitCountsLine)
			if !ok {
				continue
			}
			var c rateLimitCounts
			if err := json.Unmarshal([]byte(data), &c); err != nil {
				f.Close()
				return sum, fmt.Errorf("worker process %d's counts: %w", p.cmd.Process.Pid, err)
			}
			sum.Requests += c.Requests
			sum.FirstTries += c.FirstTries
			sum.Status429 += c.Status429
			sum.WaitsMs = append(sum.WaitsMs, c.WaitsMs...)
			found = true
		}
		f.Close()
		if !found {
			return sum, fmt.Errorf("worker process %d printed no counts; log: %s", p.cmd.Process.Pid, tail(p.log))
		}
	}
	return sum, nil
}

// rateLimitNotes explain the rate-limit table's columns.
const rateLimitNotes = `
  429 SHARE: requests answered 429 over all requests the provider received;
  TOKENS/MIN: tokens the provider admitted (prompt + completion of the answered requests) over the window from the first request to the last reply;
  OF QUOTA: those tokens over the most the key allows in that window (a full bucket, one minute's limit, plus limit x window);
  WAIT: a turn's wait for admission, from ready to the send of the request that succeeded (agentsaga: the turn's first ActivityTaskScheduled
    to the ActivityTaskStarted of the attempt that completed it, from the histories; the plain sides: measured in the activity);
  RETRY TOKENS: agentsaga: the fleet retry bucket's withdrawals granted; the plain sides: requests retried (the SDK's and Temporal's);
  IDEAL S: the least time the quota allows for every run's turns (at the mean size of the requests answered), past the first minute's burst
`

// PrintRateLimit writes the table and the agentsaga rows' targets.
func PrintRateLimit(out io.Writer, result RateLimitResult) {
	cfg := result.Config
	fmt.Fprintf(out, "\nratelimit: %d runs x %d model turns at once, all on ONE API key of a fake OpenAI-compatible provider that allows %d requests and %s tokens a minute;\n",
		cfg.Runs, cfg.Turns, cfg.RequestsPerMinute, thousands(int(cfg.TokensPerMinute)))
	fmt.Fprintf(out, "  %s; requests of about %d characters of goal, max_completion_tokens %d (a reply uses %d), answered in %v-%v\n",
		result.Server, cfg.GoalChars, cfg.MaxTokens, cfg.CompletionTokens, cfg.LatencyMin, cfg.LatencyMax)
	fmt.Fprintf(out, "  %s: openai-go's default retries (2, honouring retry-after-ms), Temporal's retry policy (%d attempts), no limiter;\n", RateLimitSDKContender, cfg.Attempts)
	fmt.Fprintf(out, "  %s: the same, behind a golang.org/x/time/rate limiter per process for requests and tokens, each given the whole limit;\n", RateLimitPerProcessContender)
	fmt.Fprintf(out, "  %s: `agentsaga worker` processes, the limits declared in model.rate_limit; %s: nothing declared\n", RateLimitAgentsagaContender, RateLimitAgentsagaLearnContender)
	tw := newTable(out, "\n  PROCESSES\tCONTENDER\tREQUESTS\t429\t429 SHARE\tTOKENS/MIN\tOF QUOTA\tRUNS DONE\tWAIT P50\tWAIT P95\tRETRY TOKENS\tSECONDS\tIDEAL S")
	for _, r := range result.Rows {
		fmt.Fprintf(tw, "  %d\t%s\t%d\t%d\t%.1f%%\t%s\t%.0f%%\t%d of %d\t%s\t%s\t%d\t%.1f\t%.1f\n",
			r.Processes, r.Contender, r.Provider.Requests, r.Provider.RateLimited, 100*r.Share429, thousands(int(r.TPM)), 100*r.QuotaShare,
			r.Completed, r.Runs, rateLimitMs(r.WaitP50Ms), rateLimitMs(r.WaitP95Ms), r.RetryTokens, r.Seconds, r.Ideal)
	}
	tw.Flush()
	for _, r := range result.Rows {
		if r.Contender != RateLimitAgentsagaContender && r.Contender != RateLimitAgentsagaLearnContender {
			continue
		}
		share, used, completed, retries := RateLimitVerdicts(r)
		fmt.Fprintf(out, "  TARGET %s, %d processes: 429 share %.1f%% < 1%% (%s); %.0f%% of the quota >= 85%% (%s); %d of %d runs completed (%s); %d retry tokens = 0 (%s)\n",
			r.Contender, r.Processes, 100*r.Share429, verdict(share), 100*r.QuotaShare, verdict(used), r.Completed, r.Runs, verdict(completed), r.RetryTokens, verdict(retries))
	}
	fmt.Fprint(out, rateLimitNotes)
}

// RateLimitChart writes to path a PNG of three bar charts, one bar per row
// (contender and process count): the share of requests answered 429, with
// agentsaga's 1% bound; the share of the quota turned into answered
// tokens, with its 85% target; and the runs completed. The second alone
// does not tell the contenders apart: a client that hammers the key also
// keeps its bucket empty.
func RateLimitChart(path string, rows []RateLimitRow) error {
	contenders := distinct(rows, func(r RateLimitRow) string { return r.Contender })
	names := make([]string, len(rows))
	panel := func(title, label string, value func(RateLimitRow) float64, target float64, targetLabel string) (*plot.Plot, error) {
		p := plot.New()
		p.Title.Text = title
		p.Y.Label.Text = label
		p.Add(plotter.NewGrid())
		maxY := target
		for _, r := range rows {
			maxY = max(maxY, value(r))
		}
		if err := addTarget(p, plotter.XYs{{X: -0.5, Y: target}, {X: float64(len(rows)) - 0.5, Y: target}}, targetLabel); err != nil {
			return nil, err
		}
		p.Legend.Top = true
		width := chartWidth * 0.6 / vg.Length(max(len(rows), 1))
		for c, contender := range contenders {
			one := make(plotter.Values, len(rows))
			for i, r := range rows {
				if r.Contender == contender {
					one[i] = value(r)
				}
			}
			if err := addBars(p, one, width, c); err != nil {
				return nil, err
			}
		}
		for i, r := range rows {
			figure := fmt.Sprintf("%.0f%%", value(r))
			if v := value(r); v > 0 && v < 10 {
				figure = fmt.Sprintf("%.1f%%", v)
			}
			names[i] = fmt.Sprintf("%s\n%d proc.\n%s", shortContender(r.Contender), r.Processes, figure)
		}
		p.NominalX(names...)
		p.X.Tick.Label.Font.Size = vg.Points(9)
		p.X.Min, p.X.Max = -0.5, float64(len(rows))-0.5
		p.Y.Min, p.Y.Max = 0, maxY*1.25
		return p, nil
	}
	share, err := panel("Requests answered 429, one key shared by the fleet", "% of requests",
		func(r RateLimitRow) float64 { return 100 * r.Share429 }, 100*RateLimitMax429Share, "agentsaga target < 1%")
	if err != nil {
		return fmt.Errorf("bench: ratelimit chart: %w", err)
	}
	used, err := panel("Quota turned into answered tokens", "% of the tokens the key allowed",
		func(r RateLimitRow) float64 { return 100 * r.QuotaShare }, 100*RateLimitMinQuotaShare, "agentsaga target >= 85%")
	if err != nil {
		return fmt.Errorf("bench: ratelimit chart: %w", err)
	}
	completed, err := panel("Runs completed", "% of the runs started",
		func(r RateLimitRow) float64 { return 100 * float64(r.Completed) / float64(max(r.Runs, 1)) }, 100, "agentsaga target: every run")
	if err != nil {
		return fmt.Errorf("bench: ratelimit chart: %w", err)
	}
	if err := saveTiledPNG([]*plot.Plot{share, used, completed}, path); err != nil {
		return fmt.Errorf("bench: ratelimit chart: %w", err)
	}
	return nil
}

// shortContender is a contender's name for a chart's axis.
func shortContender(name string) string {
	switch name {
	case RateLimitSDKContender:
		return "SDK retries"
	case RateLimitPerProcessContender:
		return "per-process"
	case RateLimitAgentsagaContender:
		return "agentsaga"
	case RateLimitAgentsagaLearnContender:
		return "learned"
	}
	return name
}

func rateLimitMs(ms float64) string {
	if ms >= 10_000 {
		return fmt.Sprintf("%.1f s", ms/1000)
	}
	return fmt.Sprintf("%.0f ms", ms)
}
