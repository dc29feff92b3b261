package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"

	"github.com/agentsaga/agentsaga/cmd/agentsaga/bench"
	"github.com/agentsaga/agentsaga/worker"
)

// scenarioResult is what one scenario measured: the JSON it saves and the
// table it prints.
type scenarioResult struct {
	json  map[string]any
	print func(io.Writer)
	// chart draws the scenario's PNG; nil for scenarios without one.
	chart func(path string) error
}

func benchCommand() *cobra.Command {
	var temporalBin, chart, outPath string
	var asJSON bool
	cfg := bench.DefaultAmplification
	long := bench.DefaultLong
	outputKiB := long.OutputBytes >> 10
	fleet := bench.DefaultFleet
	ratelimit := bench.DefaultRateLimit
	spend := bench.DefaultSpend
	fairness := bench.DefaultFairness
	takeover := bench.DefaultTakeover
	cmd := &cobra.Command{
		Use:   "bench amplification|success|overhead|storm|drain|ledger|long|fleet|takeover|ratelimit|spend|fairness|stream|cache|webhooks [--json] [--out FILE.json] [--chart FILE.png] [--runs R --calls C --workers W] [--turns 10,100,1000] [--processes 2,4 --rounds N] [--runs-a N --runs-b N] [--kills N]",
		Short: "Run a benchmark scenario on a real dev server and Postgres, beside its baselines, and print the figures",
		Long: `Run a benchmark scenario on a real dev server and Postgres, beside its baselines, and print the
figures. --json prints them as JSON instead of a table; --out also saves that JSON to a file.
` + "`agentsaga bench serve`" + ` runs the fault-injecting downstream on its own.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			scenario := args[0]
			switch scenario {
			case "amplification", "success", "overhead", "storm", "drain", "ledger", "long", "fleet", "takeover", "ratelimit", "spend", "fairness", "stream", "cache", "webhooks":
			default:
				return fmt.Errorf("bench: unknown scenario %q (the scenarios are: amplification, success, overhead, storm, drain, ledger, long, fleet, takeover, ratelimit, spend, fairness, stream, cache, webhooks; and serve)", scenario)
			}
			if cfg.Runs < 1 || cfg.Calls < 1 || cfg.Workers < 1 {
				return fmt.Errorf("bench: --runs %d, --calls %d and --workers %d must be positive", cfg.Runs, cfg.Calls, cfg.Workers)
			}
			if chart != "" && scenario != "amplification" && scenario != "storm" && scenario != "long" && scenario != "ratelimit" && scenario != "spend" {
				return fmt.Errorf("bench: --chart applies to amplification, storm, long, ratelimit and spend, not %s", scenario)
			}
			if outputKiB < 1 || long.ContextTokens < 0 {
				return fmt.Errorf("bench: --output-kib %d must be positive and --context-tokens %d not negative", outputKiB, long.ContextTokens)
			}
			long.OutputBytes = outputKiB << 10
			ctx, out := cmd.Context(), cmd.OutOrStdout()
			progress := out
			if asJSON {
				progress = cmd.ErrOrStderr()
			}
			// The fleet, takeover, ratelimit, spend and fairness scenarios
			// start their own dev servers (and executors) and worker
			// processes; a dev stack's worker would only compete.
			var result scenarioResult
			var err error
			ownProcesses := true
			switch scenario {
			case "fleet":
				result, err = fleetScenario(cmd, progress, temporalBin, fleet)
			case "takeover":
				result, err = takeoverScenario(cmd, progress, temporalBin, takeover)
			case "ratelimit":
				result, err = rateLimitScenario(cmd, progress, temporalBin, ratelimit)
			case "spend":
				result, err = spendScenario(cmd, progress, temporalBin, spend)
			case "fairness":
				result, err = fairnessScenario(cmd, progress, temporalBin, fairness)
			default:
				ownProcesses = false
			}
			if err != nil {
				return err
			}
			stack := &devStack{}
			if !ownProcesses {
				if stack, err = startDevStack(ctx, progress, temporalBin); err != nil {
					return err
				}
				defer stack.Close()
			}
			switch scenario {
			case "amplification":
				rows, err := bench.Amplification(ctx, stack.client, stack.cfg.DatabaseURL, cfg)
				if err != nil {
					return err
				}
				result = scenarioResult{json: map[string]any{"config": cfg, "rows": rows},
					print: func(w io.Writer) {
						bench.PrintRows(w, fmt.Sprintf("\namplification: a 100%% outage, %d runs x %d tool calls on %d workers", cfg.Runs, cfg.Calls, cfg.Workers), rows)
					},
					chart: func(path string) error { return bench.AmplificationChart(path, rows) }}
			case "success":
				rows, err := bench.Success(ctx, stack.client, stack.cfg.DatabaseURL, cfg, []float64{0.05, 0.20})
				if err != nil {
					return err
				}
				result = scenarioResult{json: map[string]any{"config": cfg, "rows": rows},
					print: func(w io.Writer) {
						bench.PrintSuccess(w, fmt.Sprintf("\nsuccess: independent failures, %d runs x %d tool calls on %d workers, 3 attempts per call", cfg.Runs, cfg.Calls, cfg.Workers), rows)
					}}
			case "overhead":
				rows, err := bench.Overhead(ctx, stack.client, stack.cfg.DatabaseURL, cfg)
				if err != nil {
					return err
				}
				result = scenarioResult{json: map[string]any{"config": cfg, "rows": rows},
					print: func(w io.Writer) {
						bench.PrintOverhead(w, fmt.Sprintf("\noverhead: %d runs x %d sequential calls to a healthy downstream, side by side", cfg.Runs, cfg.Calls), rows)
					}}
			case "drain":
				drain := bench.DefaultDrain
				rows, err := bench.Drain(ctx, stack.client, stack.cfg.DatabaseURL, drain)
				if err != nil {
					return err
				}
				result = scenarioResult{json: map[string]any{"config": drain, "rows": rows},
					print: func(w io.Writer) { fmt.Fprintln(w); bench.PrintDrain(w, drain, rows) }}
			case "storm":
				storm := bench.DefaultStorm
				rows, err := bench.Storm(ctx, stack.client, stack.cfg.DatabaseURL, storm)
				if err != nil {
					return err
				}
				// After the storm, not beside it: the two would share the machine.
				outage, err := bench.ToolOutage(ctx, stack.client, stack.cfg.DatabaseURL, bench.DefaultToolOutage)
				if err != nil {
					return err
				}
				oneRun, err := bench.OneToolDown(ctx, stack.client, stack.cfg.DatabaseURL, bench.DefaultOneToolDown)
				if err != nil {
					return err
				}
				result = scenarioResult{json: map[string]any{"config": storm, "budget_window_seconds": bench.BudgetWindow.Seconds(), "rows": rows, "tool_outage": outage,
					"one_run_one_tool_down": oneRun},
					print: func(w io.Writer) {
						bench.PrintStorm(w, fmt.Sprintf("\nstorm: %g calls/s offered to a downstream serving %d/s, with an outage", storm.CallsPerSecond, storm.RatePerSecond), storm, rows)
						bench.PrintToolOutage(w, fmt.Sprintf("\nsingle-tool outage: %d agent runs call one tool, down for their first %v", outage.Config.Runs, outage.Config.Outage), outage)
						bench.PrintOneToolDown(w, fmt.Sprintf("\none run, one tool down %v", oneRun.Config.Outage), oneRun)
					},
					chart: func(path string) error { return bench.StormChart(path, storm, rows) }}
			case "long":
				long.Progress = progress
				rows, err := bench.Long(ctx, stack.client, stack.cfg.DatabaseURL, long)
				if err != nil {
					return err
				}
				result = scenarioResult{json: map[string]any{"config": long, "rows": rows, "targets": bench.LongTargets(long, rows)},
					print: func(w io.Writer) {
						bench.PrintLong(w, fmt.Sprintf("\nlong: one %d KiB tool output a turn, an OpenAI-compatible model on loopback", outputKiB), long, rows)
					},
					chart: func(path string) error { return bench.LongChart(path, rows) }}
			case "stream":
				sc := bench.DefaultStream
				if cmd.Flags().Changed("runs") {
					sc.Runs, _ = cmd.Flags().GetInt("runs")
				}
				exe, err := os.Executable()
				if err != nil {
					return fmt.Errorf("bench: stream: find this binary: %w", err)
				}
				sc.Executable, sc.TemporalAddress, sc.Namespace, sc.DatabaseURL, sc.Progress =
					exe, stack.cfg.TemporalAddress, stack.cfg.Namespace, stack.cfg.DatabaseURL, progress
				res, err := bench.Stream(ctx, stack.client, stack.store, sc)
				if err != nil {
					return err
				}
				result = scenarioResult{json: map[string]any{"result": res}, print: func(w io.Writer) { bench.PrintStream(w, res) }}
			case "cache":
				cc := bench.DefaultCache
				cc.Progress = progress
				if cmd.Flags().Changed("turns") {
					if turns, _ := cmd.Flags().GetIntSlice("turns"); len(turns) > 0 {
						cc.Turns = turns[0]
					}
				}
				res, err := bench.Cache(ctx, stack.client, stack.cfg.DatabaseURL, cc)
				if err != nil {
					return err
				}
				result = scenarioResult{json: map[string]any{"result": res}, print: func(w io.Writer) { bench.PrintCache(w, res) }}
			case "webhooks":
				wc := bench.DefaultWebhooks
				wc.Progress = progress
				rows, err := bench.Webhooks(ctx, stack.cfg.DatabaseURL, wc)
				if err != nil {
					return err
				}
				result = scenarioResult{json: map[string]any{"config": wc, "rows": rows},
					print: func(w io.Writer) { bench.PrintWebhooks(w, wc, rows) }}
			case "ledger":
				rows, err := bench.Ledger(ctx, stack.cfg.DatabaseURL, 8, 10*time.Second)
				if err != nil {
					return err
				}
				result = scenarioResult{json: map[string]any{"clients": 8, "seconds_each": 10, "rows": rows},
					print: func(w io.Writer) {
						bench.PrintLedger(w, "\nledger: idempotent action writes beside pgbench, 8 clients, 10 s each", rows)
					}}
			}
			result.json["scenario"] = scenario
			result.json["machine"] = machine()
			if chart != "" {
				if err := result.chart(chart); err != nil {
					return err
				}
				fmt.Fprintf(progress, "chart: %s\n", chart)
			}
			if outPath != "" {
				if err := writeJSON(outPath, result.json); err != nil {
					return err
				}
				fmt.Fprintf(progress, "figures: %s\n", outPath)
			}
			if asJSON {
				return printJSON(out, result.json)
			}
			result.print(out)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the figures as JSON instead of a table")
	cmd.Flags().StringVar(&outPath, "out", "", "also save the figures as JSON to this file")
	cmd.Flags().StringVar(&chart, "chart", "", "also write a PNG chart to this file (amplification, storm, long, ratelimit and spend only)")
	cmd.Flags().IntVar(&cfg.Runs, "runs", cfg.Runs, "concurrent runs per contender (amplification, success, overhead)")
	cmd.Flags().IntVar(&cfg.Calls, "calls", cfg.Calls, "tool calls per run (amplification, success, overhead)")
	cmd.Flags().IntVar(&cfg.Workers, "workers", cfg.Workers, "workers per contender, each with its own Postgres pool")
	cmd.Flags().IntSliceVar(&long.Turns, "turns", long.Turns, "run lengths in turns, one run each (long); model turns of the run (cache, its first value)")
	cmd.Flags().IntVar(&outputKiB, "output-kib", outputKiB, "size of each tool output in KiB (long)")
	cmd.Flags().IntVar(&long.ContextTokens, "context-tokens", 0, "write model.context_tokens into the spec (long; 0 leaves it out)")
	cmd.Flags().IntSliceVar(&fleet.Processes, "processes", fleet.Processes, "worker processes per contender, one measurement each (fleet, ratelimit, spend)")
	cmd.Flags().IntVar(&fleet.PoolMaxConns, "pool-max-conns", fleet.PoolMaxConns, "each agentsaga worker's Postgres pool (fleet)")
	cmd.Flags().IntVar(&fleet.Rounds, "rounds", fleet.Rounds, "measure each plain/agentsaga pair this many times (fleet)")
	cmd.Flags().StringSliceVar(&fleet.Servers, "servers", fleet.Servers, "dev servers to run on: file (--db-filename), memory, or both (fleet)")
	cmd.Flags().BoolVar(&fleet.DBOS, "dbos", fleet.DBOS, "also measure the agent loop as a DBOS Transact workflow on Postgres (fleet)")
	cmd.Flags().Int64Var(&ratelimit.RequestsPerMinute, "rpm", ratelimit.RequestsPerMinute, "the provider's requests per minute on the one key (ratelimit)")
	cmd.Flags().Int64Var(&ratelimit.TokensPerMinute, "tpm", ratelimit.TokensPerMinute, "the provider's tokens per minute on the one key (ratelimit)")
	cmd.Flags().StringSliceVar(&ratelimit.Contenders, "contenders", ratelimit.Contenders, "which to run: sdk, per-process, agentsaga, agentsaga-learned (ratelimit); per-run, check-then-record, agentsaga-turn, agentsaga (spend); fcfs, temporal, round-robin, both, burst (fairness); agentsaga, dbos-restart, dbos-survivor (takeover)")
	cmd.Flags().IntVar(&fairness.RunsA, "runs-a", fairness.RunsA, "account A's runs, started first (fairness)")
	cmd.Flags().IntVar(&fairness.RunsB, "runs-b", fairness.RunsB, "account B's runs, started once A's are under way (fairness)")
	cmd.Flags().IntVar(&fairness.BAfter, "b-after", fairness.BAfter, "B starts once this many of A's runs have ended (fairness)")
	cmd.Flags().IntVar(&fairness.MaxActivities, "max-activities", fairness.MaxActivities, "each worker process's activities at once: the fleet holds processes x this many turns (fairness)")
	cmd.Flags().DurationVar(&fairness.LatencyMin, "latency-min", fairness.LatencyMin, "the fake provider's quickest answer to a turn (fairness)")
	cmd.Flags().DurationVar(&fairness.LatencyMax, "latency-max", fairness.LatencyMax, "the fake provider's slowest answer to a turn (fairness)")
	cmd.Flags().IntVar(&fairness.MaxConcurrentRuns, "max-concurrent-runs", fairness.MaxConcurrentRuns, "the root account's max_concurrent_runs for the engine's round robin (fairness)")
	cmd.Flags().IntVar(&takeover.Kills, "kills", takeover.Kills, "runs per contender, each with one worker kill -9 (takeover)")
	cmd.Flags().StringVar(&temporalBin, "temporal", "", "the Temporal CLI binary (default: bin/temporal)")
	cmd.AddCommand(benchServeCommand(), benchFleetWorkerCommand(), benchDBOSWorkerCommand(), benchRateLimitWorkerCommand(), benchSpendWorkerCommand())
	return cmd
}

func benchServeCommand() *cobra.Command {
	var addr, outages string
	var faults bench.Faults
	var seed uint64
	cmd := &cobra.Command{
		Use:   "serve [--addr HOST:PORT] [--failure-rate P] [--outage FROM-TO,...] [--capacity N] [--rate N] [--latency D]",
		Short: "Serve the fault-injecting downstream; GET " + bench.CountsPath + " returns what it has counted",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if faults.FailureRate < 0 || faults.FailureRate > 1 {
				return fmt.Errorf("bench serve: --failure-rate %v is not a probability between 0 and 1", faults.FailureRate)
			}
			if faults.Capacity < 0 || faults.RatePerSecond < 0 || faults.Latency < 0 {
				return fmt.Errorf("bench serve: --capacity %d, --rate %d and --latency %v must not be negative", faults.Capacity, faults.RatePerSecond, faults.Latency)
			}
			windows, err := parseOutages(outages)
			if err != nil {
				return err
			}
			faults.Outages = windows
			down, err := bench.ServeDownstream(addr, faults, seed)
			if err != nil {
				return err
			}
			defer down.Close()
			fmt.Fprintf(cmd.OutOrStdout(), "downstream: serving at %s (counts at %s%s); Ctrl-C stops it\n", down.URL(), down.URL(), bench.CountsPath)
			<-cmd.Context().Done()
			counts := down.Counts()
			fmt.Fprintf(cmd.OutOrStdout(), "downstream: %d requests, %d failed, %d idempotency keys\n", counts.Requests, counts.Failures, counts.Keys)
			return nil
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:8099", "where to listen")
	cmd.Flags().Float64Var(&faults.FailureRate, "failure-rate", 0, "probability that a request fails with 503 on its own")
	cmd.Flags().StringVar(&outages, "outage", "", "windows of 100% 503 since start, e.g. 10s-40s,90s-100s")
	cmd.Flags().IntVar(&faults.Capacity, "capacity", 0, "requests in flight at most; more fail with 503 (0: no limit)")
	cmd.Flags().IntVar(&faults.RatePerSecond, "rate", 0, "requests served per second at most; more fail with 503 (0: no limit)")
	cmd.Flags().DurationVar(&faults.Latency, "latency", 0, "time to serve one request")
	cmd.Flags().Uint64Var(&seed, "seed", 1, "seed of the failure-rate draws")
	return cmd
}

// parseOutages reads "10s-40s,90s-100s" into windows.
func parseOutages(s string) ([]bench.Window, error) {
	var windows []bench.Window
	for _, part := range strings.Split(s, ",") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		from, to, ok := strings.Cut(strings.TrimSpace(part), "-")
		if !ok {
			return nil, fmt.Errorf("bench serve: --outage %q: want FROM-TO, e.g. 10s-40s", part)
		}
		f, err := time.ParseDuration(from)
		if err != nil {
			return nil, fmt.Errorf("bench serve: --outage %q: start: %w", part, err)
		}
		t, err := time.ParseDuration(to)
		if err != nil {
			return nil, fmt.Errorf("bench serve: --outage %q: end: %w", part, err)
		}
		if f < 0 || t <= f {
			return nil, fmt.Errorf("bench serve: --outage %q: the end must come after the start, and the start must not be negative", part)
		}
		windows = append(windows, bench.Window{From: f, To: t})
	}
	return windows, nil
}

func writeJSON(path string, v any) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("bench: save figures: %w", err)
	}
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("bench: save figures: %w", err)
	}
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("bench: save figures to %s: %w", path, err)
	}
	return nil
}

// machine describes where the figures were measured, for the saved JSON.
func machine() map[string]any {
	cpu := "unknown"
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if name, ok := strings.CutPrefix(line, "model name"); ok {
				cpu = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(name), ":"))
				break
			}
		}
	}
	return map[string]any{"cpus": runtime.NumCPU(), "cpu": cpu, "os": runtime.GOOS + "/" + runtime.GOARCH,
		"go": runtime.Version(), "measured_at": time.Now().UTC().Format(time.RFC3339)}
}

// fleetScenario runs bench.Fleet with this binary as the worker processes;
// --runs and --calls apply when given, else the fleet's own defaults.
func fleetScenario(cmd *cobra.Command, progress io.Writer, temporalBin string, cfg bench.FleetConfig) (scenarioResult, error) {
	flags := cmd.Flags()
	ifChanged(cmd, "runs", &cfg.Runs, flags.GetInt)
	ifChanged(cmd, "calls", &cfg.Calls, flags.GetInt)
	return runProcessScenario(cmd, progress, temporalBin, "fleet", "two dev servers", &cfg, &cfg.ProcessScenario, bench.Fleet,
		func(result bench.FleetResult) scenarioResult {
			return scenarioResult{json: map[string]any{"config": result.Config, "statement_source": result.StatementSource, "rows": result.Rows, "ratios": result.Ratios},
				print: func(w io.Writer) { bench.PrintFleet(w, result) }}
		})
}

// benchFleetWorkerCommand is one plain worker process of the fleet
// scenario, hidden: only `agentsaga bench fleet` starts it.
func benchFleetWorkerCommand() *cobra.Command {
	queue := bench.FleetPlainQueue
	cmd := &cobra.Command{
		Use:    "fleet-worker [--task-queue NAME]",
		Short:  "A plain Temporal worker (no interceptor, no ledger) for the fleet scenario; reads TEMPORAL_ADDRESS and TEMPORAL_NAMESPACE",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withTemporal(cmd, func(c client.Client) error {
				return bench.RunFleetPlainWorker(cmd.Context(), cmd.OutOrStdout(), c, queue)
			})
		},
	}
	cmd.Flags().StringVar(&queue, "task-queue", queue, "the task queue to poll")
	return cmd
}

// benchDBOSWorkerCommand is one DBOS executor of the fleet scenario,
// hidden: only `agentsaga bench fleet` starts it.
func benchDBOSWorkerCommand() *cobra.Command {
	return &cobra.Command{
		Use:    "dbos-worker",
		Short:  "A DBOS Transact executor for the fleet scenario's DBOS contender; reads DBOS_SYSTEM_DATABASE_URL",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			url := os.Getenv("DBOS_SYSTEM_DATABASE_URL")
			if url == "" {
				return fmt.Errorf("bench dbos-worker: DBOS_SYSTEM_DATABASE_URL is not set")
			}
			return bench.RunFleetDBOSWorker(cmd.Context(), cmd.OutOrStdout(), url)
		},
	}
}

// rateLimitScenario runs bench.RateLimit with this binary as the worker
// processes; --runs, --processes, --pool-max-conns and --turns (its first
// value: turns per run) apply when given, else the scenario's defaults.
func rateLimitScenario(cmd *cobra.Command, progress io.Writer, temporalBin string, cfg bench.RateLimitConfig) (scenarioResult, error) {
	flags := cmd.Flags()
	ifChanged(cmd, "runs", &cfg.Runs, flags.GetInt)
	ifChanged(cmd, "processes", &cfg.Processes, flags.GetIntSlice)
	ifChanged(cmd, "pool-max-conns", &cfg.PoolMaxConns, flags.GetInt)
	ifChanged(cmd, "turns", &cfg.Turns, firstInt(flags.GetIntSlice, cfg.Turns))
	return runProcessScenario(cmd, progress, temporalBin, "ratelimit", "a dev server in memory", &cfg, &cfg.ProcessScenario, bench.RateLimit,
		func(result bench.RateLimitResult) scenarioResult {
			return scenarioResult{json: map[string]any{"config": result.Config, "server": result.Server, "rows": result.Rows},
				print: func(w io.Writer) { bench.PrintRateLimit(w, result) },
				chart: func(path string) error { return bench.RateLimitChart(path, result.Rows) }}
		})
}

// benchRateLimitWorkerCommand is one plain worker process of the
// ratelimit scenario, hidden: only `agentsaga bench ratelimit` starts it.
func benchRateLimitWorkerCommand() *cobra.Command {
	queue := "bench-ratelimit"
	var rpm, tpm int64
	cmd := &cobra.Command{
		Use:    "ratelimit-worker [--task-queue NAME] [--rpm N --tpm N]",
		Short:  "A plain Temporal worker whose model turns call openai-go with its default retries, behind a limiter of its own when --rpm and --tpm are given, for the ratelimit scenario",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withTemporal(cmd, func(c client.Client) error {
				return bench.RunRateLimitPlainWorker(cmd.Context(), cmd.OutOrStdout(), c, queue, rpm, tpm)
			})
		},
	}
	cmd.Flags().StringVar(&queue, "task-queue", queue, "the task queue to poll")
	cmd.Flags().Int64Var(&rpm, "rpm", 0, "this process's limiter: requests per minute (0: no limiter)")
	cmd.Flags().Int64Var(&tpm, "tpm", 0, "this process's limiter: tokens per minute (0: no limiter)")
	return cmd
}

// processScenario fills in what a scenario that starts its own dev server
// and worker processes of this binary needs: the Temporal CLI, this
// binary, the database its workers use, and where its progress goes; and,
// when servers is given, says what it starts.
func processScenario(ps *bench.ProcessScenario, progress io.Writer, temporalBin, scenario, servers string) error {
	temporal, err := findTemporal(temporalBin)
	if err != nil {
		return err
	}
	executable, err := os.Executable()
	if err != nil {
		return fmt.Errorf("bench: %s: find this binary: %w", scenario, err)
	}
	ps.TemporalBin, ps.Executable, ps.DatabaseURL, ps.Progress = temporal, executable, worker.ConfigFromEnv().DatabaseURL, progress
	if servers != "" {
		fmt.Fprintf(progress, "%s: %s from %s, worker processes from %s\n", scenario, servers, ps.TemporalBin, ps.Executable)
	}
	return nil
}

// runProcessScenario runs a scenario that starts its own dev server and
// worker processes of this binary (processScenario fills in ps, which is
// in cfg) and makes its result a scenarioResult.
func runProcessScenario[C, R any](cmd *cobra.Command, progress io.Writer, temporalBin, scenario, servers string, cfg *C, ps *bench.ProcessScenario,
	run func(context.Context, C) (R, error), result func(R) scenarioResult) (scenarioResult, error) {
	if err := processScenario(ps, progress, temporalBin, scenario, servers); err != nil {
		return scenarioResult{}, err
	}
	r, err := run(cmd.Context(), *cfg)
	if err != nil {
		return scenarioResult{}, err
	}
	return result(r), nil
}

// ifChanged sets *v to the flag name's value (read by get) when the
// command was given the flag.
func ifChanged[T any](cmd *cobra.Command, name string, v *T, get func(string) (T, error)) {
	if cmd.Flags().Changed(name) {
		*v, _ = get(name)
	}
}

// firstInt reads a list flag's first value, or keeps otherwise for an
// empty list.
func firstInt(get func(string) ([]int, error), otherwise int) func(string) (int, error) {
	return func(name string) (int, error) {
		values, err := get(name)
		if err != nil || len(values) == 0 {
			return otherwise, err
		}
		return values[0], nil
	}
}

// withTemporal runs a hidden worker command's body with a client dialled
// as every command dials (worker.Dial), and closes it after.
func withTemporal(cmd *cobra.Command, run func(client.Client) error) error {
	c, err := worker.Dial(cmd.Context(), worker.ConfigFromEnv())
	if err != nil {
		return err
	}
	defer c.Close()
	return run(c)
}

// spendScenario runs bench.Spend with this binary as the worker processes;
// --runs and --processes apply when given, else the scenario's defaults.
func spendScenario(cmd *cobra.Command, progress io.Writer, temporalBin string, cfg bench.SpendConfig) (scenarioResult, error) {
	flags := cmd.Flags()
	ifChanged(cmd, "runs", &cfg.Runs, flags.GetInt)
	ifChanged(cmd, "processes", &cfg.Processes, flags.GetIntSlice)
	ifChanged(cmd, "contenders", &cfg.Contenders, flags.GetStringSlice)
	return runProcessScenario(cmd, progress, temporalBin, "spend", "a dev server in memory", &cfg, &cfg.ProcessScenario, bench.Spend,
		func(result bench.SpendResult) scenarioResult {
			return scenarioResult{json: map[string]any{"config": result.Config, "rows": result.Rows},
				print: func(w io.Writer) { bench.PrintSpend(w, result) },
				chart: func(path string) error { return bench.SpendChart(path, result.Rows) }}
		})
}

// takeoverScenario runs bench.Takeover with this binary as the worker
// processes and executors; --calls and --contenders apply when given.
func takeoverScenario(cmd *cobra.Command, progress io.Writer, temporalBin string, cfg bench.TakeoverConfig) (scenarioResult, error) {
	flags := cmd.Flags()
	ifChanged(cmd, "calls", &cfg.Calls, flags.GetInt)
	ifChanged(cmd, "contenders", &cfg.Contenders, flags.GetStringSlice)
	return runProcessScenario(cmd, progress, temporalBin, "takeover", "", &cfg, &cfg.ProcessScenario, bench.Takeover,
		func(result bench.TakeoverResult) scenarioResult {
			return scenarioResult{json: map[string]any{"config": result.Config, "rows": result.Rows},
				print: func(w io.Writer) { bench.PrintTakeover(w, result) }}
		})
}

// fairnessScenario runs bench.Fairness with this binary as the worker
// processes; --processes (its first value) and --contenders apply when
// given, else the scenario's defaults.
func fairnessScenario(cmd *cobra.Command, progress io.Writer, temporalBin string, cfg bench.FairnessConfig) (scenarioResult, error) {
	flags := cmd.Flags()
	ifChanged(cmd, "processes", &cfg.Processes, firstInt(flags.GetIntSlice, cfg.Processes))
	ifChanged(cmd, "contenders", &cfg.Contenders, flags.GetStringSlice)
	return runProcessScenario(cmd, progress, temporalBin, "fairness", "dev servers in memory", &cfg, &cfg.ProcessScenario, bench.Fairness,
		func(result bench.FairnessResult) scenarioResult {
			return scenarioResult{json: map[string]any{"config": result.Config, "baselines": result.Baselines, "rows": result.Rows},
				print: func(w io.Writer) { bench.PrintFairness(w, result) }}
		})
}

// benchSpendWorkerCommand is one worker process of the spend scenario,
// hidden: only `agentsaga bench spend` starts it.
func benchSpendWorkerCommand() *cobra.Command {
	cfg := bench.SpendWorkerConfig{Queue: "bench-spend"}
	cmd := &cobra.Command{
		Use:    "spend-worker [--task-queue NAME] [--account PATH --cap-usd USD --usd-per-million USD]",
		Short:  "An agentsaga worker for the spend scenario, serving the check-then-record model provider when --account is given; reads DATABASE_URL and TEMPORAL_*",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.DatabaseURL = worker.ConfigFromEnv().DatabaseURL
			return withTemporal(cmd, func(c client.Client) error {
				return bench.RunSpendWorker(cmd.Context(), cmd.OutOrStdout(), c, cfg)
			})
		},
	}
	cmd.Flags().StringVar(&cfg.Queue, "task-queue", cfg.Queue, "the task queue to poll")
	cmd.Flags().StringVar(&cfg.Account, "account", "", "the check-then-record provider's account (none: the provider is not served)")
	cmd.Flags().Float64Var(&cfg.CapUSD, "cap-usd", 0, "the check-then-record provider's cap on the account")
	cmd.Flags().Float64Var(&cfg.USDPerMillion, "usd-per-million", 0, "the check-then-record provider's price, per million tokens each way")
	cmd.Flags().IntVar(&cfg.MaxActivities, "max-activities", 0, "the activities the worker runs at once (0: the SDK's default)")
	return cmd
}
