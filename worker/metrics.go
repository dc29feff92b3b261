package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/uber-go/tally/v4"
	tallyprom "github.com/uber-go/tally/v4/prometheus"
	"go.temporal.io/sdk/client"
	sdktally "go.temporal.io/sdk/contrib/tally"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/webhooks"
	"github.com/agentsaga/agentsaga/ledger"
)

// MetricsPath is where Serve answers.
const MetricsPath = "/metrics"

// ledgerScrapeTimeout bounds the ledger queries of one scrape.
const ledgerScrapeTimeout = 5 * time.Second

// temporalReportInterval is how often the SDK's metrics are copied from
// the tally scope into the Prometheus registry.
const temporalReportInterval = time.Second

// metrics is a worker's Prometheus registry. It holds three kinds of
// metric, all served from one endpoint:
//
//   - this process's retry decisions (ObserveRetry, for Options.Observe);
//   - the fleet's figures, read from the ledger at scrape time, so that
//     every worker reports the same numbers and they survive restarts;
//   - the Temporal SDK's own metrics (temporal_*), through TemporalHandler,
//     plus the Go runtime's and the process's (go_*, process_*).
type metrics struct {
	registry *prometheus.Registry
	retries  *prometheus.CounterVec
	temporal client.MetricsHandler
	closer   io.Closer
	handler  http.Handler
}

// newMetrics builds the registry. A nil store leaves the ledger figures
// out. Close it when done, after the Temporal client that uses
// TemporalHandler.
func newMetrics(store *ledger.Store) (*metrics, error) {
	m := &metrics{registry: prometheus.NewRegistry()}
	m.retries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentsaga_retry_decisions_total",
		Help: "Retry decisions this worker's retry hook made since it started, by tool (\"model\" for model calls) " +
			"and decision: \"" + budget.Granted + "\" or the budget that denied the retry (" +
			budget.DenyFleetBucket + ", " + budget.DenyRunRatio + ", " + budget.DenyToolCap + ", " +
			budget.DenyCircuitOpen + ", " + budget.DenyDeadline + ", " + budget.DenyCallAttempts + ").",
	}, []string{"tool", "decision"})
	toRegister := []prometheus.Collector{
		m.retries,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	}
	if store != nil {
		toRegister = append(toRegister, newLedgerCollector(ledgerdb.Of(store)))
	}
	for _, c := range toRegister {
		if err := m.registry.Register(c); err != nil {
			return nil, fmt.Errorf("worker: metrics: %w", err)
		}
	}

	// The SDK reports through tally; tally's Prometheus reporter registers
	// each SDK metric into the same registry the first time it is used.
	logRegisterError := onceByMessage(func(err error) {
		slog.Default().Warn("worker: metrics: cannot register a Temporal SDK metric", "error", err)
	})
	reporter := tallyprom.NewReporter(tallyprom.Options{
		Registerer:       m.registry,
		Gatherer:         m.registry,
		DefaultTimerType: tallyprom.HistogramTimerType,
		OnRegisterError:  logRegisterError,
	})
	scope, closer := tally.NewRootScope(tally.ScopeOptions{
		CachedReporter:         reporter,
		Separator:              tallyprom.DefaultSeparator,
		SanitizeOptions:        &temporalSanitizeOptions,
		OmitCardinalityMetrics: true,
	}, temporalReportInterval)
	m.temporal = sdktally.NewMetricsHandler(sdktally.NewPrometheusNamingScope(scope))
	m.closer = closer

	// A failed ledger query does not fail the scrape: the rest is served.
	m.handler = promhttp.InstrumentMetricHandler(m.registry, promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{
		ErrorHandling: promhttp.ContinueOnError,
		ErrorLog:      slog.NewLogLogger(slog.Default().Handler(), slog.LevelWarn),
		Registry:      m.registry,
	}))
	return m, nil
}

// temporalSanitizeOptions make the SDK's metric names and label names
// valid for Prometheus, as sdktally.PrometheusSanitizeOptions do, but keep
// label values as they are (Prometheus takes any UTF-8 there), so that a
// task_queue or workflow_type label reads as the real name.
var temporalSanitizeOptions = tally.SanitizeOptions{
	NameCharacters:       sdktally.PrometheusSanitizeOptions.NameCharacters,
	KeyCharacters:        sdktally.PrometheusSanitizeOptions.KeyCharacters,
	ValueCharacters:      tally.ValidCharacters{Ranges: []tally.SanitizeRange{{0, unicode.MaxRune}}},
	ReplacementCharacter: tally.DefaultReplacementCharacter,
}

// onceByMessage calls log once for each distinct error message, so a
// metric that cannot be registered is reported once, not at every report.
func onceByMessage(log func(error)) func(error) {
	var seen sync.Map
	return func(err error) {
		if _, dup := seen.LoadOrStore(err.Error(), true); !dup {
			log(err)
		}
	}
}

// ObserveRetry counts one retry decision; it has the signature of
// Options.Observe.
func (m *metrics) ObserveRetry(plan agentsagatype.RetryPlan, decision string) {
	if c, err := m.retries.GetMetricWithLabelValues(plan.Tool, decision); err == nil { // err: invalid UTF-8
		c.Inc()
	}
}

// TemporalHandler is the Temporal SDK's metrics handler (set it as
// client.Options.MetricsHandler): the SDK's metrics appear on the same
// endpoint, named the Prometheus way (temporal_request_total,
// temporal_workflow_task_execution_latency_seconds, ...), within a second
// of being recorded.
func (m *metrics) TemporalHandler() client.MetricsHandler { return m.temporal }

// Handler serves every metric in the Prometheus text format. A failed
// ledger query does not fail the scrape: the other metrics are served and
// agentsaga_ledger_up reads 0.
func (m *metrics) Handler() http.Handler { return m.handler }

// Serve listens on addr ("127.0.0.1:9464", ":0", ...) and serves Handler at
// MetricsPath until ctx ends. It returns the address it bound.
func (m *metrics) Serve(ctx context.Context, addr string) (net.Addr, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("worker: metrics: listen on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle(MetricsPath, m.Handler())
	server := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := server.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Default().Error("worker: metrics server stopped", "address", ln.Addr().String(), "error", err)
		}
	}()
	go func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = server.Shutdown(shutdownCtx)
	}()
	return ln.Addr(), nil
}

// Close stops copying the SDK's metrics into the registry, after a last
// copy.
func (m *metrics) Close() error { return m.closer.Close() }

// ledgerCollector reads the fleet's figures from the ledger at every
// scrape.
type ledgerCollector struct {
	store *ledgerdb.Store

	up, bucketTokens, bucketCapacity, breakerState, runs          *prometheus.Desc
	leafCalls, logicalCalls, amplification, usdSpent, tokensSpent *prometheus.Desc
	spendCap, spendSpent, spendReserved, spendRefusals            *prometheus.Desc
	spendWaiting                                                  *prometheus.Desc
	runsQueued, queueOldestWait, queueAdmitted, queueAdmittedWait *prometheus.Desc
	webhookDeliveries, webhookOldest                              *prometheus.Desc
}

// gauge is prometheus.MustNewConstMetric for a gauge that never panics: a
// label value Prometheus refuses (invalid UTF-8) makes an invalid metric,
// which the scrape reports and skips.
func gauge(desc *prometheus.Desc, v float64, labels ...string) prometheus.Metric {
	m, err := prometheus.NewConstMetric(desc, prometheus.GaugeValue, v, labels...)
	if err != nil {
		return prometheus.NewInvalidMetric(desc, err)
	}
	return m
}

var breakerStates = []string{budget.BreakerClosed, budget.BreakerOpen, budget.BreakerHalfOpen}

func newLedgerCollector(store *ledgerdb.Store) *ledgerCollector {
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &ledgerCollector{
		store: store,
		up: desc("agentsaga_ledger_up",
			"1 if this scrape read the ledger's fleet figures, 0 if the query failed (the agentsaga_* ledger gauges are then missing)."),
		bucketTokens: desc("agentsaga_retry_bucket_tokens",
			"Tokens in the fleet retry bucket now, refill included (agentsaga_bucket_level); each granted retry takes one.", "bucket"),
		bucketCapacity: desc("agentsaga_retry_bucket_capacity",
			"Capacity of the fleet retry bucket: the most tokens it holds.", "bucket"),
		breakerState: desc("agentsaga_circuit_breaker_state",
			"Fleet-wide circuit breaker of a dependency: 1 for its current state (closed, open or half-open), 0 for the other two.",
			"dependency", "state"),
		runs: desc("agentsaga_runs",
			"Runs in the ledger by status (queued, running, completed, partial, escalated, compensated, needs-attention, failed, terminated).", "status"),
		leafCalls: desc("agentsaga_leaf_calls",
			"Attempts that left a worker (model calls, tool calls and compensations, retries included), fleet-wide: rows of leaf_calls."),
		logicalCalls: desc("agentsaga_logical_calls",
			"Calls the workflows asked for, retries not counted, fleet-wide: distinct (workflow_id, activity_id) in leaf_calls."),
		amplification: desc("agentsaga_amplification",
			"Retry amplification, fleet-wide: agentsaga_leaf_calls / agentsaga_logical_calls (0 when there are none). 1 means no retries."),
		usdSpent: desc("agentsaga_usd_spent",
			"US dollars spent by finished runs, fleet-wide (sum of runs.usd_spent where finished)."),
		tokensSpent: desc("agentsaga_tokens_spent",
			"Model tokens spent by finished runs, fleet-wide (sum of runs.tokens_used where finished)."),
		spendCap: desc("agentsaga_spend_cap_usd",
			"An account's spend cap for a period (agentsaga spend set), in USD.", "account", "period"),
		spendSpent: desc("agentsaga_spend_spent_usd",
			"What an account spent in the current period of a cap, settled turns only, in USD.", "account", "period"),
		spendReserved: desc("agentsaga_spend_reserved_usd",
			"What an account holds for turns in flight in the current period of a cap, in USD.", "account", "period"),
		spendRefusals: desc("agentsaga_spend_refusals_total",
			"Calls (model turns and priced tool calls) an account's spend cap refused since it was set, fleet-wide.", "account", "period"),
		spendWaiting: desc("agentsaga_spend_runs_waiting",
			"Unfinished runs that wait for an account's spend caps, or are escalated on them.", "account", "period"),
		runsQueued: desc("agentsaga_runs_queued",
			"Runs of an account waiting in its admission queue now (agentsaga queue); 0 for an account whose queue emptied in the last hour.", "account"),
		queueOldestWait: desc("agentsaga_queue_oldest_wait_seconds",
			"How long the account's oldest queued run has waited, in seconds (0: none waits).", "account"),
		queueAdmitted: desc("agentsaga_queue_admitted_last_hour",
			"Runs of an account admitted in the last hour, at once or after waiting.", "account"),
		queueAdmittedWait: desc("agentsaga_queue_admitted_wait_seconds",
			"Waits of the account's runs admitted in the last hour, from enqueued to admitted, in seconds (0 for a run admitted at once): stat p50, p95 or max.",
			"account", "stat"),
		webhookDeliveries: desc("agentsaga_webhook_deliveries",
			"Webhook deliveries in the outbox by status: pending (not sent yet), failed (retrying), delivered, dead (given up or 410).",
			"status"),
		webhookOldest: desc("agentsaga_webhook_oldest_undelivered_seconds",
			"Age of the oldest webhook delivery not delivered yet (pending or failed), in seconds; 0 when none waits."),
	}
}

func (c *ledgerCollector) descs() []*prometheus.Desc {
	return []*prometheus.Desc{c.up, c.bucketTokens, c.bucketCapacity, c.breakerState, c.runs,
		c.leafCalls, c.logicalCalls, c.amplification, c.usdSpent, c.tokensSpent, c.spendCap, c.spendSpent, c.spendReserved,
		c.spendRefusals, c.spendWaiting, c.runsQueued, c.queueOldestWait, c.queueAdmitted, c.queueAdmittedWait,
		c.webhookDeliveries, c.webhookOldest}
}

// Describe implements prometheus.Collector.
func (c *ledgerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs() {
		ch <- d
	}
}

// Collect implements prometheus.Collector: one batch of ledger queries per
// scrape, bounded by ledgerScrapeTimeout.
func (c *ledgerCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), ledgerScrapeTimeout)
	defer cancel()
	f, err := c.store.FleetFigures(ctx)
	if err != nil {
		ch <- gauge(c.up, 0)
		// Reported to the scrape's error log; ContinueOnError serves the rest.
		ch <- prometheus.NewInvalidMetric(c.leafCalls, err)
		return
	}
	ch <- gauge(c.up, 1)
	for _, b := range f.Buckets {
		ch <- gauge(c.bucketTokens, b.Tokens, b.Name)
		ch <- gauge(c.bucketCapacity, b.Capacity, b.Name)
	}
	for _, b := range f.Breakers {
		for _, state := range breakerStates {
			v := 0.0
			if b.State == state {
				v = 1
			}
			ch <- gauge(c.breakerState, v, b.Dependency, state)
		}
	}
	for status, n := range f.RunsByStatus {
		ch <- gauge(c.runs, float64(n), status)
	}
	ch <- gauge(c.leafCalls, float64(f.LeafCalls))
	ch <- gauge(c.logicalCalls, float64(f.LogicalCalls))
	ch <- gauge(c.amplification, f.Amplification())
	ch <- gauge(c.usdSpent, f.USDSpent)
	ch <- gauge(c.tokensSpent, float64(f.TokensSpent))
	c.collectQueues(ctx, ch)
	if st, err := webhooks.NewStore(c.store.Pool()).Stats(ctx); err != nil {
		ch <- prometheus.NewInvalidMetric(c.webhookDeliveries, err)
	} else {
		for status, n := range map[string]int64{webhooks.StatusPending: st.Pending, webhooks.StatusFailed: st.Failed,
			webhooks.StatusDelivered: st.Delivered, webhooks.StatusDead: st.Dead} {
			ch <- gauge(c.webhookDeliveries, float64(n), status)
		}
		ch <- gauge(c.webhookOldest, st.OldestUndelivered.Seconds())
	}
	caps, err := c.store.SpendCaps(ctx, "")
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.spendCap, err)
		return
	}
	for _, s := range caps {
		ch <- gauge(c.spendCap, s.USD, s.Account, s.Period)
		ch <- gauge(c.spendSpent, s.Spent, s.Account, s.Period)
		ch <- gauge(c.spendReserved, s.Reserved, s.Account, s.Period)
		ch <- gauge(c.spendWaiting, float64(s.Waiting), s.Account, s.Period)
		if m, err := prometheus.NewConstMetric(c.spendRefusals, prometheus.CounterValue, float64(s.Refusals), s.Account, s.Period); err == nil {
			ch <- m
		} else {
			ch <- prometheus.NewInvalidMetric(c.spendRefusals, err)
		}
	}
}

// collectQueues reports the admission queues by account: the runs queued
// and the oldest's wait, and the waits of the runs admitted in the last
// hour.
func (c *ledgerCollector) collectQueues(ctx context.Context, ch chan<- prometheus.Metric) {
	figures, err := c.store.QueueFigures(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.runsQueued, err)
		return
	}
	for _, f := range figures {
		ch <- gauge(c.runsQueued, float64(f.Queued), f.Account)
		ch <- gauge(c.queueOldestWait, f.OldestWaitSeconds, f.Account)
		ch <- gauge(c.queueAdmitted, float64(f.AdmittedLastHour), f.Account)
		ch <- gauge(c.queueAdmittedWait, f.WaitP50Seconds, f.Account, "p50")
		ch <- gauge(c.queueAdmittedWait, f.WaitP95Seconds, f.Account, "p95")
		ch <- gauge(c.queueAdmittedWait, f.WaitMaxSeconds, f.Account, "max")
	}
}
