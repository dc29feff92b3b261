package api

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"go.temporal.io/sdk/client"
	"golang.org/x/time/rate"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/cmd/agentsaga/apikeys"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/runevents"
	"github.com/agentsaga/agentsaga/internal/webhooks"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/workflows"
)

// StartFunc starts a run under id, charged to account ("" for none): the
// path `agentsaga run` takes, so that a run started over HTTP is checked
// and started as one started from the CLI.
type StartFunc func(ctx context.Context, id string, spec workflows.RunSpec, account string) (*agentsaga.Run, error)

// Config is what an API process serves from.
type Config struct {
	// Store is the ledger: runs, approvals, keys, idempotency keys and the
	// runs' event logs.
	Store *ledger.Store
	// Client is Temporal's, for the decisions; Start starts runs.
	Client client.Client
	Start  StartFunc
	// Hub wakes the process's event streams; the caller runs it
	// (runevents.Hub.Run), one per process.
	Hub *runevents.Hub
	// Logger hears failed authentications and failures of the API's own;
	// nil is slog.Default().
	Logger *slog.Logger
	// FailedAuthRate and FailedAuthBurst bound failed authentications per
	// client address: a burst, then one per 1/rate; past them a request is
	// answered 429 without its key being looked at. Zero is 10 a minute
	// after a burst of 10.
	FailedAuthRate  rate.Limit
	FailedAuthBurst int
	// Heartbeat is how often an idle event stream sends a comment, so that
	// proxies keep it open (default 15s); Poll is how often it reads the
	// log without a wake-up (default 2s).
	Heartbeat, Poll time.Duration
	// Namespace is Temporal's namespace, where a fork starts ("" is
	// default).
	Namespace string
	// DecisionTimeout bounds how long a decision waits for the run to
	// accept it (default 30s): a run with no worker never does.
	DecisionTimeout time.Duration
}

// Server is the HTTP API, an http.Handler.
type Server struct {
	cfg      Config
	db       *ledgerdb.Store
	keys     *apikeys.Keys
	log      *runevents.Log
	feed     *runevents.Feed // one reader per followed run, for all its streams
	mux      *http.ServeMux
	routes   []string
	failures *failureLimiter
	webhooks *webhooks.Store
}

// New builds the API over cfg.
func New(cfg Config) (*Server, error) {
	if cfg.Store == nil || cfg.Hub == nil {
		return nil, errors.New("api: a Store and a Hub are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.FailedAuthRate == 0 {
		cfg.FailedAuthRate = rate.Every(6 * time.Second)
	}
	if cfg.FailedAuthBurst == 0 {
		cfg.FailedAuthBurst = 10
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = 15 * time.Second
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 2 * time.Second
	}
	if cfg.DecisionTimeout <= 0 {
		cfg.DecisionTimeout = 30 * time.Second
	}
	db := ledgerdb.Of(cfg.Store)
	s := &Server{cfg: cfg, db: db, keys: apikeys.New(db.Pool()), log: runevents.New(db.Pool()), mux: http.NewServeMux(),
		failures: &failureLimiter{every: cfg.FailedAuthRate, burst: cfg.FailedAuthBurst, byAddr: map[string]*rate.Limiter{}}}
	s.feed = runevents.NewFeed(s.log, cfg.Hub, cfg.Poll)
	s.webhooks = webhooks.NewStore(db.Pool())
	s.handle("POST /v1/runs", apikeys.RunsWrite, s.startRun)
	s.handle("GET /v1/runs", apikeys.RunsRead, s.listRuns)
	s.handle("GET /v1/runs/{id}", apikeys.RunsRead, s.getRun)
	s.handle("GET /v1/runs/{id}/events", apikeys.RunsRead, s.events)
	s.handle("GET /v1/runs/{id}/report", apikeys.RunsRead, s.getReport)
	for _, d := range runDecisions {
		s.handle("POST /v1/runs/{id}/"+d.name, apikeys.RunsWrite, s.decide(d))
	}
	s.handle("POST /v1/runs/{id}/cancel-queued", apikeys.RunsWrite, s.cancelQueued)
	s.handle("POST /v1/runs/{id}/fork", apikeys.RunsWrite, s.fork)
	s.handle("GET /v1/queue", apikeys.RunsRead, s.listQueue)
	s.handle("GET /v1/approvals", apikeys.RunsRead, s.listApprovals)
	s.handle("POST /v1/runs/{id}/approvals/{call}/approve", apikeys.ApprovalsDecide, s.decideApproval(true))
	s.handle("POST /v1/runs/{id}/approvals/{call}/deny", apikeys.ApprovalsDecide, s.decideApproval(false))
	s.handleWebhooks()
	s.handle("GET /v1/openapi.json", "", s.openAPI)
	s.handle("GET /runs/{id}", "", s.page)
	return s, nil
}

// Routes are the API's routes, "METHOD /path/{param}", as registered.
func (s *Server) Routes() []string { return s.routes }

// handlerFunc answers a request made with key (the zero Key on a route
// that needs none). An error it returns is the answer: a *Problem as it
// is, anything else a 500 that names nothing internal.
type handlerFunc func(w http.ResponseWriter, r *http.Request, key apikeys.Key) error

// handle registers h under pattern; a scope means the route needs a key
// that holds it.
func (s *Server) handle(pattern, scope string, h handlerFunc) {
	s.routes = append(s.routes, pattern)
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		var key apikeys.Key
		if scope != "" {
			k, p := s.authenticate(r)
			if p == nil && !k.Can(scope) {
				p = problem(http.StatusForbidden, "forbidden", "Forbidden", "the key %q does not hold the scope %s, which %s needs", k.Name, scope, pattern)
			}
			if p != nil {
				writeProblem(w, p)
				return
			}
			key = k
		}
		if err := h(w, r, key); err != nil {
			s.fail(w, r, err)
		}
	})
}

// fail answers a handler's error.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	var p *Problem
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &p):
	case errors.As(err, &tooLarge):
		p = problem(http.StatusRequestEntityTooLarge, "body-too-large", "Body too large", "the body is over %d bytes", tooLarge.Limit)
	case r.Context().Err() != nil:
		return // the client has gone
	case errors.Is(err, context.DeadlineExceeded):
		p = problem(http.StatusGatewayTimeout, "timeout", "Timeout", "the answer did not come in time: %v", err)
	default:
		s.cfg.Logger.Error("api: request failed", "method", r.Method, "path", r.URL.Path, "error", err)
		p = problem(http.StatusInternalServerError, "internal", "Internal error", "the request failed on the server; its log says why")
	}
	writeProblem(w, p)
}

// ServeHTTP answers a request; a path or a method the API does not have
// is a problem+json 404 or 405 too.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if _, pattern := s.mux.Handler(r); pattern == "" {
		// The mux's own answer (404, 405 with Allow, a redirect) tells
		// which; it is written to a recorder and said again as a problem.
		rec := &statusRecorder{header: http.Header{}}
		s.mux.ServeHTTP(rec, r)
		switch rec.status {
		case http.StatusMethodNotAllowed:
			w.Header().Set("Allow", rec.header.Get("Allow"))
			writeProblem(w, problem(rec.status, "method-not-allowed", "Method not allowed", "%s is not allowed on %s; allowed: %s", r.Method, r.URL.Path, rec.header.Get("Allow")))
		case http.StatusNotFound:
			writeProblem(w, problem(rec.status, "not-found", "Not found", "no route %s %s (see /v1/openapi.json)", r.Method, r.URL.Path))
		default:
			for k, v := range rec.header {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.status)
		}
		return
	}
	s.mux.ServeHTTP(w, r)
}

// statusRecorder keeps what the mux answers a request no route takes.
type statusRecorder struct {
	header http.Header
	status int
}

func (r *statusRecorder) Header() http.Header         { return r.header }
func (r *statusRecorder) Write(b []byte) (int, error) { return len(b), nil }
func (r *statusRecorder) WriteHeader(status int)      { r.status = status }

// authenticate reads the request's bearer key. A client address whose
// failures are over the limit is answered 429 before its key is looked at.
func (s *Server) authenticate(r *http.Request) (apikeys.Key, *Problem) {
	addr := clientAddress(r)
	if wait, blocked := s.failures.blocked(addr, time.Now()); blocked {
		p := problem(http.StatusTooManyRequests, "too-many-failed-authentications", "Too many failed authentications",
			"too many requests from %s failed to authenticate; try again in %s", addr, wait.Round(time.Second))
		p.retryAfter = wait
		return apikeys.Key{}, p
	}
	token, why := bearer(r)
	if why == "" {
		key, err := s.keys.Authenticate(r.Context(), token)
		switch {
		case err == nil:
			return key, nil
		case errors.Is(err, apikeys.ErrUnknownKey):
			why = "the key is not a live key (unknown, mistyped or revoked)"
		default:
			s.cfg.Logger.Error("api: authenticate", "error", err)
			return apikeys.Key{}, problem(http.StatusServiceUnavailable, "unavailable", "Unavailable", "the key could not be checked now; try again")
		}
	}
	s.failures.failed(addr, time.Now())
	// The key itself is never logged: a mistyped key is one character
	// away from a live one.
	s.cfg.Logger.Warn("api: authentication failed", "client", addr, "method", r.Method, "path", r.URL.Path, "why", why)
	return apikeys.Key{}, problem(http.StatusUnauthorized, "unauthorized", "Unauthorized", "%s; send Authorization: Bearer KEY (agentsaga keys create)", why)
}

// bearer is the request's bearer token, or why there is none.
func bearer(r *http.Request) (token, why string) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return "", "no key"
	}
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return "", "the Authorization header is not Bearer KEY"
	}
	return strings.TrimSpace(token), ""
}

// clientAddress is the address failures are counted against: the peer's
// IP. Behind a load balancer that is the balancer's, so its failures are
// shared by its clients; no forwarded header is trusted, since a client
// could set it to anything.
func clientAddress(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// failureLimiter counts failed authentications per client address in a
// token bucket each: a failure takes a token, and an address whose bucket
// is empty is refused until it refills. Buckets that are full again are
// dropped, so the map holds only addresses that failed lately.
type failureLimiter struct {
	mu     sync.Mutex
	every  rate.Limit
	burst  int
	byAddr map[string]*rate.Limiter
	swept  time.Time
}

// blocked says whether addr is over the limit, and for how long.
func (l *failureLimiter) blocked(addr string, now time.Time) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lim := l.byAddr[addr]
	if lim == nil {
		return 0, false
	}
	tokens := lim.TokensAt(now)
	if tokens >= 1 {
		return 0, false
	}
	return time.Duration((1 - tokens) / float64(l.every) * float64(time.Second)), true
}

// failed takes a token of addr's bucket.
func (l *failureLimiter) failed(addr string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lim := l.byAddr[addr]
	if lim == nil {
		lim = rate.NewLimiter(l.every, l.burst)
		l.byAddr[addr] = lim
	}
	lim.AllowN(now, 1)
	if now.Sub(l.swept) > time.Minute {
		l.swept = now
		for a, b := range l.byAddr {
			if b.TokensAt(now) >= float64(l.burst) {
				delete(l.byAddr, a)
			}
		}
	}
}
