package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentsaga/agentsaga/internal/runevents"
	"github.com/agentsaga/agentsaga/internal/webhooks"
)

// WebhooksConfig is `agentsaga bench webhooks`: Events run events (each a
// webhook) published over Runs runs by Publishers goroutines, delivered
// by Processes deliverers to a loopback receiver, once healthy and once
// failing half its requests.
type WebhooksConfig struct {
	Events, Runs, Publishers, Processes int
	// Wait bounds each phase once everything is published.
	Wait     time.Duration
	Progress io.Writer `json:"-"`
}

// DefaultWebhooks is issue 44's benchmark: 10,000 events.
var DefaultWebhooks = WebhooksConfig{Events: 10000, Runs: 200, Publishers: 16, Processes: 2, Wait: 5 * time.Minute}

// WebhooksRow is one phase's figures. Latency is event to delivery: from
// the run event's timestamp (stored by Postgres) to the receiver's first
// 2xx answer for its webhook-id, in ms.
type WebhooksRow struct {
	Receiver  string `json:"receiver"`
	Events    int    `json:"events"`
	Delivered int    `json:"delivered"`
	// Retrying are the events not delivered when the phase ended whose
	// delivery is still pending or failed, to be tried again; Lost are
	// the rest: given up (dead), or never in the outbox.
	Retrying   int         `json:"retrying"`
	Lost       int         `json:"lost"`
	Requests   int         `json:"requests"`
	OutOfOrder int         `json:"out_of_order"`
	Latency    Percentiles `json:"latency_ms"`
	Seconds    float64     `json:"seconds"`
}

// webhookReceiver is the loopback receiver: it fails a share of its
// requests at random and keeps, per webhook-id, when it first answered
// 2xx and how long after its event that was.
type webhookReceiver struct {
	failShare float64
	mu        sync.Mutex
	requests  int
	first     map[string]float64 // webhook-id: latency in ms
	lastSeq   map[string]int64
	outOfOrd  int
	allIn     chan struct{}
	want      int
}

func (rc *webhookReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	at := time.Now()
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.requests++
	if rand.Float64() < rc.failShare {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	id := r.Header.Get("webhook-id")
	if _, seen := rc.first[id]; !seen {
		var m webhooks.Message
		_ = json.Unmarshal(body, &m)
		stored, _ := time.Parse(time.RFC3339Nano, m.Timestamp)
		rc.first[id] = ms(at.Sub(stored))
		if m.Data.Event.Seq < rc.lastSeq[m.Data.Run] {
			rc.outOfOrd++
		}
		rc.lastSeq[m.Data.Run] = m.Data.Event.Seq
		if len(rc.first) == rc.want {
			close(rc.allIn)
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

// Webhooks runs both phases on databaseURL's ledger, each on an outbox of
// its own endpoint.
func Webhooks(ctx context.Context, databaseURL string, cfg WebhooksConfig) ([]WebhooksRow, error) {
	pool, err := pgxpool.New(ctx, databaseURL)
	if err != nil {
		return nil, fmt.Errorf("bench webhooks: %w", err)
	}
	defer pool.Close()
	var rows []WebhooksRow
	for _, phase := range []struct {
		name string
		fail float64
	}{{"healthy", 0}, {"failing half its requests", 0.5}} {
		row, err := webhooksPhase(ctx, pool, cfg, phase.name, phase.fail)
		if err != nil {
			return rows, err
		}
		rows = append(rows, row)
	}
	return rows, nil
}

func webhooksPhase(ctx context.Context, pool *pgxpool.Pool, cfg WebhooksConfig, name string, fail float64) (WebhooksRow, error) {
	row := WebhooksRow{Receiver: name, Events: cfg.Events}
	if _, err := pool.Exec(ctx, `DELETE FROM webhook_endpoints`); err != nil {
		return row, fmt.Errorf("bench webhooks: %w", err)
	}
	rc := &webhookReceiver{failShare: fail, first: map[string]float64{}, lastSeq: map[string]int64{}, allIn: make(chan struct{}), want: cfg.Events}
	var server loopback
	if err := server.serve("127.0.0.1:0", rc); err != nil {
		return row, err
	}
	defer server.Close()
	store := webhooks.NewStore(pool)
	if _, err := store.Create(ctx, webhooks.NewEndpoint{URL: server.URL() + "/hook",
		Events: []string{webhooks.RunEscalated}, AllowPrivate: true}); err != nil {
		return row, err
	}
	dctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		stop()
		wg.Wait()
	}()
	for i := range cfg.Processes {
		d := webhooks.NewDeliverer(pool, webhooks.Options{Owner: fmt.Sprintf("bench-%d", i)})
		wg.Go(func() { _ = d.Run(dctx) })
	}
	fmt.Fprintf(cfg.Progress, "webhooks, receiver %s: publishing %d events over %d runs\n", name, cfg.Events, cfg.Runs)
	start := time.Now()
	log := runevents.New(pool)
	// Run IDs of this invocation's own: an event already in the log (a
	// bench run before, on the same database) is stored once, and makes
	// no delivery.
	prefix := "bench-" + name[:4] + "-" + nonce()
	errs := make(chan error, cfg.Publishers)
	var pub sync.WaitGroup
	for p := range cfg.Publishers {
		pub.Go(func() {
			for i := p; i < cfg.Events; i += cfg.Publishers {
				run := fmt.Sprintf("%s-%d", prefix, i%cfg.Runs)
				data, _ := json.Marshal(map[string]string{"status": "escalated", "detail": "bench"})
				if _, err := log.Publish(ctx, run, runevents.Event{Key: fmt.Sprintf("e-%d", i), Kind: runevents.Escalated, Data: data}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	pub.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return row, fmt.Errorf("bench webhooks: publish: %w", err)
	}
	select {
	case <-rc.allIn:
	case <-time.After(cfg.Wait):
	case <-ctx.Done():
		return row, ctx.Err()
	}
	row.Seconds = time.Since(start).Seconds()
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var sample []float64
	for _, l := range rc.first {
		sample = append(sample, l)
	}
	row.Delivered, row.Requests, row.OutOfOrder = len(rc.first), rc.requests, rc.outOfOrd
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE workflow_id LIKE $1 || '-%' AND status IN ('pending', 'failed')`,
		prefix).Scan(&row.Retrying); err != nil {
		return row, fmt.Errorf("bench webhooks: %w", err)
	}
	row.Lost = cfg.Events - row.Delivered - row.Retrying
	row.Latency = percentiles(sample)
	return row, nil
}

// PrintWebhooks prints the phases.
func PrintWebhooks(w io.Writer, cfg WebhooksConfig, rows []WebhooksRow) {
	fmt.Fprintf(w, "\nwebhooks: %d events over %d runs, %d delivering processes, a loopback receiver; event to delivery (target: p95 < 1 s healthy, 0 lost)\n",
		cfg.Events, cfg.Runs, cfg.Processes)
	fmt.Fprintf(w, "%-26s %9s %8s %6s %9s %12s %10s %10s %10s %8s\n", "receiver", "delivered", "retrying", "lost", "requests", "out of order", "p50 ms", "p95 ms", "max ms", "seconds")
	for _, r := range rows {
		fmt.Fprintf(w, "%-26s %9d %8d %6d %9d %12d %10.1f %10.1f %10.1f %8.1f\n", r.Receiver, r.Delivered, r.Retrying, r.Lost, r.Requests, r.OutOfOrder,
			r.Latency.P50, r.Latency.P95, r.Latency.Max, r.Seconds)
	}
}
