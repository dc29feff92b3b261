package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/agentsagatest"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/cmd/agentsaga/apikeys"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/runevents"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/workflows"
)

// world is an API over a database of its own, without Temporal: its
// starts are recorded by a Start that checks the spec as agentsaga.Start
// does, and refuses an ID it started before.
type world struct {
	t      testing.TB
	url    string
	api    *Server
	store  *ledger.Store
	db     *ledgerdb.Store
	events *runevents.Log
	logs   *lockedBuffer

	mu      sync.Mutex
	started map[string]workflows.RunSpec
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func newWorld(t testing.TB, configure ...func(*Config)) *world {
	t.Helper()
	store := agentsagatest.NewLedger(t)
	w := &world{t: t, store: store, db: ledgerdb.Of(store), events: runevents.New(ledgerdb.Of(store).Pool()),
		logs: &lockedBuffer{}, started: map[string]workflows.RunSpec{}}
	hub := runevents.NewHub(w.db.Pool())
	ctx, stop := context.WithCancel(context.Background())
	hubDone := make(chan struct{})
	go func() { defer close(hubDone); hub.Run(ctx, nil) }()
	cfg := Config{Store: store, Hub: hub, Logger: slog.New(slog.NewTextHandler(w.logs, nil)), Start: w.start,
		FailedAuthRate: rate.Every(time.Hour), FailedAuthBurst: 1000, Heartbeat: 100 * time.Millisecond, Poll: time.Second}
	for _, c := range configure {
		c(&cfg)
	}
	api, err := New(cfg)
	require.NoError(t, err)
	w.api = api
	srv := httptest.NewServer(api)
	w.url = srv.URL
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close(); stop(); <-hubDone })
	return w
}

// start stands in for agentsaga.Start: a spec that does not resolve is
// refused, and so is an ID started before.
func (w *world) start(_ context.Context, id string, spec workflows.RunSpec, account string) (*agentsaga.Run, error) {
	spec.Budget.Account = account
	if _, err := spec.Resolve(); err != nil {
		return nil, &agentsaga.InvalidSpecError{Err: err}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.started[id]; ok {
		return nil, &agentsaga.RunExistsError{ID: id}
	}
	w.started[id] = spec
	return &agentsaga.Run{ID: id, RunID: "exec-" + id}, nil
}

func (w *world) starts() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.started)
}

// key makes an API key and returns it.
func (w *world) key(name, account string, scopes ...string) string {
	w.t.Helper()
	token, _, err := apikeys.New(w.db.Pool()).Create(context.Background(), name, scopes, account)
	require.NoError(w.t, err)
	return token
}

// run puts a run charged to account in the ledger, as its first activity
// would.
func (w *world) run(id, account string) {
	w.t.Helper()
	spec, _ := json.Marshal(map[string]any{"goal": "g", "budget": map[string]any{"account": account}})
	require.NoError(w.t, w.db.StartRun(context.Background(), agentsagaRun(id, spec)))
}

// answer is a response, read whole.
type answer struct {
	status int
	header http.Header
	body   []byte
}

func (a answer) json(t testing.TB) map[string]any {
	t.Helper()
	var v map[string]any
	require.NoError(t, json.Unmarshal(a.body, &v), "%s", a.body)
	return v
}

// do sends a request; headers are name, value pairs.
func (w *world) do(method, path, token, body string, headers ...string) answer {
	w.t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, w.url+path, r)
	require.NoError(w.t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(w.t, err)
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	require.NoError(w.t, err)
	return answer{status: res.StatusCode, header: res.Header, body: data}
}

func agentsagaRun(id string, spec json.RawMessage) agentsagatype.Run {
	return agentsagatype.Run{WorkflowID: id, RunID: "exec-" + id, Goal: "g", Spec: spec}
}
