package webhooks_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/internal/runevents"
	"github.com/agentsaga/agentsaga/internal/webhooks"
)

// newPool is a fresh ledger database's pool.
func newPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, _ := newPoolURL(t)
	return pool
}

// newPoolURL is newPool with its database's URL.
func newPoolURL(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	url := ledgertest.NewPooledDatabase(t)
	pool, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool, url
}

// loopbackOnly is the tests' dialer: it connects to loopback and fails the
// test for any other address, so that no test sends a packet elsewhere.
type loopbackOnly struct {
	t      testing.TB
	mu     sync.Mutex
	dialed []string
}

func (l *loopbackOnly) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	l.mu.Lock()
	l.dialed = append(l.dialed, address)
	l.mu.Unlock()
	ap, err := netip.ParseAddrPort(address)
	if err != nil || !ap.Addr().IsLoopback() {
		l.t.Errorf("a webhook dialed %s, which is not loopback", address)
		return nil, errors.New("stub dialer: not loopback: not dialed")
	}
	var d net.Dialer
	return d.DialContext(ctx, network, address)
}

func (l *loopbackOnly) addresses() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.dialed...)
}

// stubResolver answers from its map, and nothing else.
type stubResolver map[string][]netip.Addr

func (r stubResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := r[host]; ok {
		return a, nil
	}
	return nil, fmt.Errorf("stub resolver: no such host %s", host)
}

// clock is a test's clock, moved by hand.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Now()} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// received is one request a receiver answered 2xx, or not.
type received struct {
	ID, Timestamp, Signature string
	Body                     []byte
	OK                       bool
	Message                  webhooks.Message
}

// receiver is a loopback webhook receiver whose answer a test sets.
type receiver struct {
	*httptest.Server
	mu     sync.Mutex
	got    []received
	answer func(n int, r *http.Request) int // the status for the n-th request (from 1)
}

func newReceiver(t testing.TB, answer func(n int, r *http.Request) int) *receiver {
	rc := &receiver{answer: answer}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		n := len(rc.got) + 1
		rc.got = append(rc.got, received{ID: r.Header.Get("webhook-id"), Timestamp: r.Header.Get("webhook-timestamp"),
			Signature: r.Header.Get("webhook-signature"), Body: body})
		rc.mu.Unlock()
		status := http.StatusOK
		rc.mu.Lock()
		answer := rc.answer
		rc.mu.Unlock()
		if answer != nil {
			r.Body = io.NopCloser(bytes.NewReader(body)) // for an answer that reads it
			status = answer(n, r)
		}
		rc.mu.Lock()
		rc.got[n-1].OK = status >= 200 && status < 300
		_ = json.Unmarshal(body, &rc.got[n-1].Message)
		rc.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(rc.Close)
	return rc
}

// setAnswer changes how the receiver answers from now on.
func (rc *receiver) setAnswer(answer func(n int, r *http.Request) int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.answer = answer
}

func (rc *receiver) requests() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]received(nil), rc.got...)
}

// delivered are the requests answered 2xx.
func (rc *receiver) delivered() []received {
	var out []received
	for _, r := range rc.requests() {
		if r.OK {
			out = append(out, r)
		}
	}
	return out
}

// verify checks r's signature with the Standard Webhooks library, as a
// receiver would: not with the package's own signing.
func verify(t testing.TB, secret string, r received) error {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	require.NoError(t, err)
	h := http.Header{}
	h.Set("webhook-id", r.ID)
	h.Set("webhook-timestamp", r.Timestamp)
	h.Set("webhook-signature", r.Signature)
	return wh.Verify(r.Body, h)
}

// escalate publishes run's n-th escalation to its log.
func escalate(t testing.TB, log *runevents.Log, run string, n int) {
	t.Helper()
	_, err := log.Publish(context.Background(), run, escalation(run, n))
	require.NoError(t, err)
}

// escalation is run's n-th escalated event.
func escalation(run string, n int) runevents.Event {
	data, _ := json.Marshal(map[string]string{"status": "escalated", "detail": fmt.Sprintf("escalation %d of %s", n, run)})
	return runevents.Event{Key: fmt.Sprintf("%s/esc-%d", run, n), Kind: runevents.Escalated, Data: data}
}

// endpoint makes an endpoint of url hearing events (run.escalated when
// none), allowed to reach loopback.
func endpoint(t testing.TB, store *webhooks.Store, url string, events ...string) webhooks.Endpoint {
	t.Helper()
	if len(events) == 0 {
		events = []string{webhooks.RunEscalated}
	}
	e, err := store.Create(context.Background(), webhooks.NewEndpoint{URL: url, Events: events, AllowPrivate: true})
	require.NoError(t, err)
	return e
}

// drain steps d until no delivery is due, moving c by step between
// passes, at most n passes.
func drain(t testing.TB, d *webhooks.Deliverer, c *clock, step time.Duration, n int) {
	t.Helper()
	for range n {
		claimed, err := d.Pass(context.Background())
		require.NoError(t, err)
		if claimed == 0 {
			c.Advance(step)
		}
	}
}
