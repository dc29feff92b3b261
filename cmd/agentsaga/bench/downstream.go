// Package bench owns agentsaga's proof: a fault-injecting downstream served
// on loopback, and the scenarios that run real workflows against it beside
// the baselines a user would pick instead, printing their figures.
package bench

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// AttemptHeader carries the caller's attempt number (1 for the first) so
// the downstream can count requests by attempt; agentsaga's HTTP tools and
// the baselines send it.
const AttemptHeader = "Agentsaga-Attempt"

// CountsPath is where the downstream serves its counters as JSON; requests
// to it are not counted.
const CountsPath = "/_counts"

// Faults shapes how the downstream fails.
type Faults struct {
	// FailureRate is the probability that a request fails on its own.
	FailureRate float64 `json:"failure_rate,omitempty"`
	// Outages are windows, measured from Start, in which every request
	// fails with 503.
	Outages []Window `json:"outages,omitempty"`
	// Capacity, when positive, is how many requests may be in flight; a
	// request beyond it fails with 503, as an overloaded service does,
	// so load above capacity keeps it failing.
	Capacity int `json:"capacity,omitempty"`
	// RatePerSecond, when positive, is how many requests each second of
	// the downstream's life may serve; the rest of that second's requests
	// fail with 503.
	RatePerSecond int `json:"rate_per_second,omitempty"`
	// Latency is how long a request takes to serve.
	Latency time.Duration `json:"latency,omitempty"`
	// OutagesFromFirstRequest starts the downstream's clock (Outages,
	// the per-second counts) at its first request instead of at Start: a
	// tool that is down for its caller's first seconds, however long the
	// caller took to reach it.
	OutagesFromFirstRequest bool `json:"outages_from_first_request,omitempty"`
}

// Window is an interval measured from the downstream's start.
type Window struct {
	From time.Duration `json:"from"`
	To   time.Duration `json:"to"`
}

// Downstream is an HTTP service on loopback that fails as told and counts
// every request it receives, by idempotency key, by attempt and in total.
type Downstream struct {
	faults    Faults
	start     time.Time
	mu        sync.Mutex
	random    *rand.Rand
	inFlight  int
	byKey     map[string]int
	byAttempt map[int]int
	total     int
	failed    int
	loopback
	// perSecond counts requests, failures and served requests in each
	// second since start; served also enforces RatePerSecond.
	perSecond []Second
}

// Second is one second of the downstream's life.
type Second struct {
	Requests int `json:"requests"`
	Failures int `json:"failures"`
}

// StartDownstream serves faults on a free port of 127.0.0.1 with a seeded
// random source.
func StartDownstream(faults Faults, seed uint64) (*Downstream, error) {
	return ServeDownstream("127.0.0.1:0", faults, seed)
}

// ServeDownstream serves faults on addr with a seeded random source.
func ServeDownstream(addr string, faults Faults, seed uint64) (*Downstream, error) {
	return serveDownstream(addr, faults, seed, nil)
}

// serveDownstream is ServeDownstream with wrap, when set, around the
// downstream's handler: a scenario that must see each request whole (its
// body, its answer) does it there, and the downstream still decides and
// counts the failures.
func serveDownstream(addr string, faults Faults, seed uint64, wrap func(*Downstream) http.Handler) (*Downstream, error) {
	d := &Downstream{faults: faults, start: time.Now(), random: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		byKey: map[string]int{}, byAttempt: map[int]int{}}
	var handler http.Handler = d
	if wrap != nil {
		handler = wrap(d)
	}
	if err := d.serve(addr, handler); err != nil {
		return nil, fmt.Errorf("bench: downstream: listen on %s: %w", addr, err)
	}
	return d, nil
}

// ServeHTTP fails or answers one request, counting it.
func (d *Downstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == CountsPath {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(d.Counts())
		return
	}
	attempt, _ := strconv.Atoi(r.Header.Get(AttemptHeader))
	d.mu.Lock()
	if d.total == 0 && d.faults.OutagesFromFirstRequest {
		d.start = time.Now()
	}
	now := time.Since(d.start)
	d.total++
	d.byKey[r.Header.Get("Idempotency-Key")]++
	d.byAttempt[attempt]++
	second := int(now / time.Second)
	for len(d.perSecond) <= second {
		d.perSecond = append(d.perSecond, Second{})
	}
	this := &d.perSecond[second]
	this.Requests++
	fail := d.random.Float64() < d.faults.FailureRate
	for _, o := range d.faults.Outages {
		fail = fail || (now >= o.From && now < o.To)
	}
	overloaded := (d.faults.Capacity > 0 && d.inFlight >= d.faults.Capacity) ||
		(d.faults.RatePerSecond > 0 && this.Requests-this.Failures > d.faults.RatePerSecond)
	if fail || overloaded {
		d.failed++
		this.Failures++
		d.mu.Unlock()
		http.Error(w, `{"error":"unavailable"}`, http.StatusServiceUnavailable)
		return
	}
	d.inFlight++
	d.mu.Unlock()
	if d.faults.Latency > 0 {
		time.Sleep(d.faults.Latency)
	}
	d.mu.Lock()
	d.inFlight--
	d.mu.Unlock()
	fmt.Fprint(w, `{"ok":true}`)
}

// Counts is what the downstream has seen.
type Counts struct {
	Requests int            `json:"requests"`
	Failures int            `json:"failures"`
	Keys     int            `json:"keys"`
	ByKey    map[string]int `json:"by_key"`
	// ByAttempt counts requests by the attempt number the caller sent;
	// 0 holds requests that sent none.
	ByAttempt map[int]int `json:"by_attempt"`
	PerSecond []Second    `json:"per_second"`
}

// Counts returns a copy of the counters.
func (d *Downstream) Counts() Counts {
	d.mu.Lock()
	defer d.mu.Unlock()
	byKey := make(map[string]int, len(d.byKey))
	for k, v := range d.byKey {
		byKey[k] = v
	}
	byAttempt := make(map[int]int, len(d.byAttempt))
	for k, v := range d.byAttempt {
		byAttempt[k] = v
	}
	return Counts{Requests: d.total, Failures: d.failed, Keys: len(byKey), ByKey: byKey, ByAttempt: byAttempt,
		PerSecond: append([]Second(nil), d.perSecond...)}
}
