package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/workflows"
)

// CacheConfig shapes the cache scenario (issue 42, item 4): one
// tool-using run of Turns model turns with a long system prompt and
// extended thinking, against the loopback AnthropicCache server, with
// prompt caching (the default) and with model.cache: false.
type CacheConfig struct {
	// Turns is the run's model turns: Turns-1 tool calls, then the answer.
	Turns int `json:"turns"`
	// SystemTokens sizes the system prompt, in the server's estimate (a
	// token is four bytes of JSON).
	SystemTokens   int               `json:"system_tokens"`
	Model          string            `json:"model"`
	MaxTokens      int64             `json:"max_tokens"`
	ThinkingBudget int64             `json:"thinking_budget_tokens"`
	Price          budget.ModelPrice `json:"price"`
	// CapUSD is the monthly cap of the account both runs are charged to.
	CapUSD float64 `json:"cap_usd"`
	// Timeout bounds each run.
	Timeout  time.Duration `json:"timeout"`
	Progress io.Writer     `json:"-"`
}

// SonnetListPrice is Claude Sonnet 4.x's list price, USD per million
// tokens: input, output, a cache read, a five-minute cache write.
var SonnetListPrice = budget.ModelPrice{InputPerMillion: 3, OutputPerMillion: 15, CachedInputPerMillion: 0.30, CacheWritePerMillion: 3.75}

// DefaultCache is what `agentsaga bench cache` runs.
var DefaultCache = CacheConfig{Turns: 40, SystemTokens: 6000, Model: "claude-sonnet-4-5", MaxTokens: 4096, ThinkingBudget: 2048,
	Price: SonnetListPrice, CapUSD: 1000, Timeout: 10 * time.Minute}

// The targets.
const (
	cacheMaxInputRatio = 0.3
	cacheMaxUSDError   = 0.01
	cacheTool          = "word_count" // a built-in Go tool (activities.Builtins)
)

// CacheRun is one run of the scenario, as the server billed it and as
// the engine and its ledger recorded it.
type CacheRun struct {
	Caching    bool   `json:"caching"`
	WorkflowID string `json:"workflow_id"`
	Status     string `json:"status"`
	Reason     string `json:"reason,omitempty"`
	// Turns is the highest turn the server answered; Requests all it
	// accepted, Rejected the 400s (Errors their distinct messages).
	Turns  int         `json:"turns"`
	Totals CacheTotals `json:"server_totals"`
	Errors []string    `json:"errors,omitempty"`
	// ServerUSD and ServerInputUSD are the server's own bill at the
	// spec's prices.
	ServerUSD      float64 `json:"server_usd"`
	ServerInputUSD float64 `json:"server_input_usd"`
	// RunUSD is the workflow's result (RunResult.Usage.USD); LedgerUSD the
	// ledger's runs row (usd_spent); EntriesUSD the account's settled
	// spend_entries.
	RunUSD     float64 `json:"run_usd"`
	LedgerUSD  float64 `json:"ledger_usd"`
	EntriesUSD float64 `json:"spend_entries_usd"`
	// ReadPerTurn is the mean cache_read_input_tokens of a request.
	ReadPerTurn float64 `json:"cache_read_tokens_per_turn"`
	// Holds are each model turn's spend reservation, read from the
	// ledger's spend_holds while the server had the request, and what its
	// settle spent (spend_entries).
	Holds   []CacheHold    `json:"holds"`
	PerTurn []CacheRequest `json:"per_turn"`
	Seconds float64        `json:"seconds"`
}

// CacheHold is one turn's reservation and what it spent.
type CacheHold struct {
	Turn        int     `json:"turn"`
	Key         string  `json:"key"`
	ReservedUSD float64 `json:"reserved_usd"`
	SpentUSD    float64 `json:"spent_usd"`
	Settled     bool    `json:"settled"`
}

// CacheResult is the scenario's figures.
type CacheResult struct {
	Config   CacheConfig `json:"config"`
	Account  string      `json:"account"`
	Cached   CacheRun    `json:"cached"`
	Uncached CacheRun    `json:"uncached"`
	// InputRatio is the cached run's input USD over the uncached run's.
	InputRatio float64      `json:"input_usd_ratio"`
	Targets    []LongTarget `json:"targets"`
}

// CacheSystemPrompt is the run's system prompt: a handbook of about
// tokens tokens (four bytes each), the same every time.
func CacheSystemPrompt(tokens int) string {
	var b strings.Builder
	b.WriteString("You are a careful counting agent. Follow the handbook below in every turn.\n\n")
	random := rand.New(rand.NewPCG(42, 0x63616368))
	for rule := 1; b.Len() < tokens*bytesPerToken; rule++ {
		fmt.Fprintf(&b, "Rule %d.", rule)
		for w := 0; w < 30; w++ {
			b.WriteString(" ")
			b.WriteString(longWords[random.IntN(len(longWords))])
		}
		b.WriteString(".\n")
	}
	return b.String()
}

// CacheSpec is one run's spec: the model at url, priced at cfg.Price,
// thinking on, caching as cache says, charged to account (none: "").
func CacheSpec(cfg CacheConfig, url string, cache bool, account string) (workflows.RunSpec, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "goal: %q\n", fmt.Sprintf("Count the words of passages 1 to %d with %s, one passage a turn, then say that you are done.", cfg.Turns-1, cacheTool))
	fmt.Fprintf(&b, "system: %q\n", CacheSystemPrompt(cfg.SystemTokens))
	// Steps and dollars to spare, and a finish_at low enough that the
	// graceful finish never starts before the last turn.
	fmt.Fprintf(&b, "budget: {steps: %d, usd: 50, seconds: %d", 2*cfg.Turns+10, int(cfg.Timeout.Seconds())+60)
	if account != "" {
		fmt.Fprintf(&b, ", account: %q", account)
	}
	b.WriteString("}\nfinish_at: 0.01\n")
	fmt.Fprintf(&b, "model:\n  provider: anthropic\n  name: %s\n  base_url: %q\n  max_tokens: %d\n  thinking: {budget_tokens: %d}\n",
		cfg.Model, url, cfg.MaxTokens, cfg.ThinkingBudget)
	if !cache {
		b.WriteString("  cache: false\n")
	}
	p := cfg.Price
	fmt.Fprintf(&b, "prices:\n  models: {%s: {input_per_million: %v, output_per_million: %v, cached_input_per_million: %v, cache_write_per_million: %v}}\n  tool_call_usd: 0\n",
		cfg.Model, p.InputPerMillion, p.OutputPerMillion, p.CachedInputPerMillion, p.CacheWritePerMillion)
	fmt.Fprintf(&b, "tools:\n  - name: %s\n    kind: go\n    description: Count the words in a text.\n    parameters: %s\n", cacheTool, rateLimitToolSchema)
	spec, err := workflows.ParseSpec([]byte(b.String()))
	if err != nil {
		return spec, fmt.Errorf("bench: cache: spec: %w", err)
	}
	return spec, nil
}

// Cache runs the scenario: the run with caching, then without, each on a
// server of its own, both on one worker and charged to one new account
// with a monthly cap.
func Cache(ctx context.Context, c client.Client, databaseURL string, cfg CacheConfig) (CacheResult, error) {
	res := CacheResult{Config: cfg}
	if cfg.Turns < 2 || cfg.SystemTokens < 0 || cfg.Timeout <= 0 {
		return res, fmt.Errorf("bench: cache: want at least 2 turns, a system prompt of 0 or more tokens and a timeout (%d, %d, %v)",
			cfg.Turns, cfg.SystemTokens, cfg.Timeout)
	}
	store, err := ledger.Open(ctx, databaseURL)
	if err != nil {
		return res, err
	}
	defer store.Close()
	id := nonce()
	res.Account = "bench-cache/" + id
	if _, err := store.SetSpendCap(ctx, ledger.SpendCap{Account: res.Account, Period: ledger.SpendMonth, USD: cfg.CapUSD}, "bench cache"); err != nil {
		return res, fmt.Errorf("bench: cache: cap the account: %w", err)
	}
	queue := "bench-cache-" + id
	w, err := startEngineWorker(ctx, c, store, queue, queue)
	if err != nil {
		return res, fmt.Errorf("bench: cache: %w", err)
	}
	defer w.Stop()
	for _, caching := range []bool{true, false} {
		run, err := cacheOne(ctx, c, store, cfg, queue, res.Account, caching)
		if err != nil {
			return res, err
		}
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "cache: caching %v: %s after %d turns in %.1f s; the server billed $%.4f\n",
				caching, run.Status, run.Turns, run.Seconds, run.ServerUSD)
		}
		if caching {
			res.Cached = run
		} else {
			res.Uncached = run
		}
	}
	if res.Uncached.ServerInputUSD > 0 {
		res.InputRatio = res.Cached.ServerInputUSD / res.Uncached.ServerInputUSD
	}
	res.Targets = CacheTargets(res)
	return res, nil
}

func cacheOne(ctx context.Context, c client.Client, store *ledger.Store, cfg CacheConfig, queue, account string, caching bool) (CacheRun, error) {
	row := CacheRun{Caching: caching, WorkflowID: queue + "-uncached"}
	if caching {
		row.WorkflowID = queue + "-cached"
	}
	server, err := StartAnthropicCache(cfg.Turns, cacheTool)
	if err != nil {
		return row, err
	}
	defer server.Close()
	spec, err := CacheSpec(cfg, server.URL(), caching, account)
	if err != nil {
		return row, err
	}
	// Each turn's reservation is in spend_holds while its request is in
	// flight: the claim holds it before the request is sent, the settle
	// ends it after the reply.
	pool := ledgerdb.Of(store).Pool()
	var mu sync.Mutex
	seen := map[string]bool{}
	server.OnRequest = func(turn int) {
		qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		rows, err := pool.Query(qctx, `SELECT idempotency_key, usd::float8 FROM spend_holds WHERE account = $1`, account)
		if err != nil {
			return
		}
		defer rows.Close()
		mu.Lock()
		defer mu.Unlock()
		for rows.Next() {
			var h CacheHold
			if rows.Scan(&h.Key, &h.ReservedUSD) == nil && !seen[h.Key] {
				seen[h.Key] = true
				h.Turn = turn
				row.Holds = append(row.Holds, h)
			}
		}
	}

	runCtx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	began := time.Now()
	run, err := startAgentRun(c, queue, spec)(runCtx, row.WorkflowID)
	if err != nil {
		return row, fmt.Errorf("bench: cache: start run: %w", err)
	}
	var result workflows.RunResult
	runErr := run.Get(runCtx, &result)
	row.Seconds = time.Since(began).Seconds()
	switch {
	case runErr == nil:
		row.Status, row.Reason, row.RunUSD = result.Status, result.Reason, result.Usage.USD
	case runCtx.Err() != nil && ctx.Err() == nil:
		row.Status, row.Reason = "stalled", fmt.Sprintf("the run did not end within %s", cfg.Timeout)
		tctx, tcancel := context.WithTimeout(ctx, 30*time.Second)
		_ = c.TerminateWorkflow(tctx, row.WorkflowID, "", "bench cache: "+row.Reason)
		tcancel()
	case ctx.Err() != nil:
		return row, ctx.Err()
	default:
		row.Status, row.Reason = "failed", runErr.Error()
	}

	qctx, qcancel := context.WithTimeout(ctx, time.Minute)
	defer qcancel()
	if got, err := ledgerdb.Of(store).GetRun(qctx, row.WorkflowID); err == nil {
		row.LedgerUSD = got.USDSpent
	}
	mu.Lock()
	holds := slices.Clone(row.Holds)
	mu.Unlock()
	for i := range holds {
		var spent float64
		err := pool.QueryRow(qctx, `SELECT usd::float8 FROM spend_entries WHERE idempotency_key = $1`, holds[i].Key).Scan(&spent)
		if err == nil {
			holds[i].SpentUSD, holds[i].Settled = spent, true
			row.EntriesUSD += spent
		}
	}
	row.Holds = holds

	row.Totals = server.Totals()
	row.ServerUSD, row.ServerInputUSD = row.Totals.USD(cfg.Price), row.Totals.InputUSD(cfg.Price)
	if row.Totals.Requests > 0 {
		row.ReadPerTurn = float64(row.Totals.CacheReadTokens) / float64(row.Totals.Requests)
	}
	for _, r := range server.Requests() {
		if r.Status != 200 {
			if !slices.Contains(row.Errors, r.Error) {
				row.Errors = append(row.Errors, r.Error)
			}
			continue
		}
		row.Turns = max(row.Turns, r.Turn)
		row.PerTurn = append(row.PerTurn, r)
	}
	return row, nil
}

// relErr is |got-want|/want; +Inf when want is 0 and got is not.
func relErr(got, want float64) float64 {
	if want == 0 {
		if got == 0 {
			return 0
		}
		return math.Inf(1)
	}
	return math.Abs(got-want) / want
}

// CacheTargets judges the targets on the figures.
func CacheTargets(res CacheResult) []LongTarget {
	var targets []LongTarget
	done := LongTarget{Target: fmt.Sprintf("both runs complete all %d turns", res.Config.Turns),
		Figure: fmt.Sprintf("cached: %s after %d turns; uncached: %s after %d turns", res.Cached.Status, res.Cached.Turns, res.Uncached.Status, res.Uncached.Turns)}
	done.Verdict = verdict(res.Cached.Status == agentsagatype.RunCompleted && res.Uncached.Status == agentsagatype.RunCompleted &&
		res.Cached.Turns == res.Config.Turns && res.Uncached.Turns == res.Config.Turns)
	targets = append(targets, done)

	ratio := LongTarget{Target: fmt.Sprintf("input USD with caching <= %.1fx uncached", cacheMaxInputRatio),
		Figure: fmt.Sprintf("$%.4f / $%.4f = %.3fx", res.Cached.ServerInputUSD, res.Uncached.ServerInputUSD, res.InputRatio)}
	ratio.Verdict = verdict(res.Uncached.ServerInputUSD > 0 && res.InputRatio <= cacheMaxInputRatio)
	targets = append(targets, ratio)

	for _, r := range []CacheRun{res.Cached, res.Uncached} {
		name := "cached"
		if !r.Caching {
			name = "uncached"
		}
		errRun, errLedger := relErr(r.RunUSD, r.ServerUSD), relErr(r.LedgerUSD, r.ServerUSD)
		t := LongTarget{Target: fmt.Sprintf("%s: the engine's USD within %.0f%% of the server's", name, 100*cacheMaxUSDError),
			Figure: fmt.Sprintf("run result $%.4f (%+.2f%%), ledger runs row $%.4f (%+.2f%%), server $%.4f", r.RunUSD,
				100*signedErr(r.RunUSD, r.ServerUSD), r.LedgerUSD, 100*signedErr(r.LedgerUSD, r.ServerUSD), r.ServerUSD)}
		t.Verdict = verdict(r.ServerUSD > 0 && errRun <= cacheMaxUSDError && errLedger <= cacheMaxUSDError)
		targets = append(targets, t)
	}

	holds, below, unsettled := 0, 0, 0
	margin := math.Inf(1)
	for _, r := range []CacheRun{res.Cached, res.Uncached} {
		for _, h := range r.Holds {
			holds++
			if !h.Settled {
				unsettled++
				continue
			}
			if h.ReservedUSD < h.SpentUSD {
				below++
			}
			if h.SpentUSD > 0 {
				margin = min(margin, h.ReservedUSD/h.SpentUSD)
			}
		}
	}
	requests := res.Cached.Totals.Requests + res.Uncached.Totals.Requests
	res2 := LongTarget{Target: "no turn's reservation below what it then spent"}
	if holds == 0 {
		res2.Figure, res2.Verdict = "not measured: no spend hold was seen while a request was in flight", "n/a"
	} else {
		res2.Figure = fmt.Sprintf("%d of %d holds (of %d requests) below their spend; %d not settled; least reserved/spent %.1fx",
			below, holds, requests, unsettled, margin)
		res2.Verdict = verdict(below == 0 && unsettled == 0 && holds == requests)
	}
	targets = append(targets, res2)
	return targets
}

func signedErr(got, want float64) float64 {
	if want == 0 {
		return 0
	}
	return (got - want) / want
}

// PrintCache writes the scenario's figures and targets.
func PrintCache(out io.Writer, res CacheResult) {
	cfg := res.Config
	fmt.Fprintf(out, "\ncache: %d model turns (%d tool calls), a %s-token system prompt, extended thinking (budget %d), provider anthropic on loopback\n",
		cfg.Turns, cfg.Turns-1, thousands(cfg.SystemTokens), cfg.ThinkingBudget)
	fmt.Fprintf(out, "  server: enforces <= %d cache_control blocks, caches prefixes of >= %s tokens at breakpoints (tools, system, messages order; %d-block lookback; %v TTL), checks thinking blocks; tokens estimated as len(JSON)/4\n",
		CacheMaxBreakpoints, thousands(CacheMinTokens), CacheLookback, CacheTTL)
	fmt.Fprintf(out, "  prices ($/M): input %v, output %v, cache read %v, cache write %v; runs charged to %s (cap $%v a month)\n",
		cfg.Price.InputPerMillion, cfg.Price.OutputPerMillion, cfg.Price.CachedInputPerMillion, cfg.Price.CacheWritePerMillion, res.Account, cfg.CapUSD)
	tw := newTable(out, "  RUN\tSTATUS\tTURNS\t400s\tINPUT\tCACHE READ\tCACHE WRITE\tOUTPUT\tREAD/TURN\tINPUT USD\tSERVER USD\tRUN USD\tLEDGER USD\tSECONDS")
	for _, r := range []CacheRun{res.Cached, res.Uncached} {
		name := "caching"
		if !r.Caching {
			name = "cache: false"
		}
		t := r.Totals
		fmt.Fprintf(tw, "  %s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t$%.4f\t$%.4f\t$%.4f\t$%.4f\t%.1f\n", name, r.Status, r.Turns, t.Rejected,
			thousands(int(t.InputTokens)), thousands(int(t.CacheReadTokens)), thousands(int(t.CacheWriteTokens)), thousands(int(t.OutputTokens)),
			thousands(int(math.Round(r.ReadPerTurn))), r.ServerInputUSD, r.ServerUSD, r.RunUSD, r.LedgerUSD, r.Seconds)
	}
	tw.Flush()
	for _, r := range []CacheRun{res.Cached, res.Uncached} {
		if r.Reason != "" && r.Status != agentsagatype.RunCompleted {
			fmt.Fprintf(out, "  caching %v: %s\n", r.Caching, clipText(r.Reason, 300))
		}
		for _, e := range r.Errors {
			fmt.Fprintf(out, "  caching %v: a 400: %s\n", r.Caching, clipText(e, 300))
		}
	}
	c, u := res.Cached.Totals, res.Uncached.Totals
	list := SonnetListPrice
	plain := budget.ModelPrice{InputPerMillion: list.InputPerMillion, OutputPerMillion: list.OutputPerMillion}
	fmt.Fprintf(out, "  at Claude Sonnet list prices (computed, no live call): the cached run's tokens cost $%.4f with caching, $%.4f as plain input (input alone: $%.4f vs $%.4f); the uncached run's $%.4f\n",
		c.USD(list), allPlain(c).USD(plain), c.InputUSD(list), allPlain(c).InputUSD(plain), u.USD(list))
	printTargets(out, "targets (issue 42)", res.Targets)
}

// allPlain is t with every input token billed as plain input.
func allPlain(t CacheTotals) CacheTotals {
	t.InputTokens, t.CacheReadTokens, t.CacheWriteTokens = t.AllInput(), 0, 0
	return t
}
