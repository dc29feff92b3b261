package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sse "github.com/tmaxmax/go-sse"

	"github.com/agentsaga/agentsaga/cmd/agentsaga/apikeys"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/runevents"
	"github.com/agentsaga/agentsaga/ledger"
)

// apiWorld is cliWorld with `agentsaga serve`'s API in front of it (the
// handler serve builds, on a loopback test server), and a key of every
// scope bound to account acme.
func apiWorld(t *testing.T) (url, key string, store *ledger.Store) {
	t.Helper()
	cliWorld(t)
	ctx := context.Background()
	store, err := ledger.Open(ctx, os.Getenv("DATABASE_URL"))
	require.NoError(t, err)
	t.Cleanup(store.Close)
	key, _, err = apikeys.New(ledgerdb.Of(store).Pool()).Create(ctx, "support-app", apikeys.Scopes, "acme")
	require.NoError(t, err)
	handler, stop, err := newAPI(ctx, devServer.Client(), store, "default", slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	srv := httptest.NewServer(handler)
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close(); stop() })
	return srv.URL, key, store
}

// call sends one request to the API and decodes its JSON answer.
func call(t *testing.T, method, url, key, body string, headers ...string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	var v map[string]any
	data, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &v), "%d %s", res.StatusCode, data)
	return res.StatusCode, v
}

// A run driven wholly over HTTP against a real dev server: started by
// POST from a YAML spec, followed over SSE to its end, its irreversible
// call approved by the key's name, and its ending read back.
func TestServeStartsFollowsAndApprovesARun(t *testing.T) {
	base, key, _ := apiWorld(t)
	bank, wires := startBank(t)
	spec := paySupplierSpec(bank, "paid")
	status, run := call(t, "POST", base+"/v1/runs?id=api-e2e", key, spec, "Content-Type", "application/yaml", "Idempotency-Key", "pay-42")
	require.Equal(t, http.StatusCreated, status, "%v", run)
	assert.Equal(t, "acme", run["account"], "charged to the key's account")
	assert.Equal(t, "support-app", run["started_by"])
	status, again := call(t, "POST", base+"/v1/runs?id=api-e2e", key, spec, "Content-Type", "application/yaml", "Idempotency-Key", "pay-42")
	require.Equal(t, http.StatusOK, status, "%v", again)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", base+"/v1/runs/api-e2e/events", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	events := make(chan runevents.Event, 100)
	go func() {
		defer close(events)
		for e, err := range sse.Read(res.Body, nil) {
			if err != nil {
				return
			}
			var event runevents.Event
			if json.Unmarshal([]byte(e.Data), &event) == nil {
				events <- event
			}
		}
	}()
	next := func(kind string) runevents.Event {
		t.Helper()
		for {
			select {
			case e, ok := <-events:
				require.True(t, ok, "the stream ended before a %s event", kind)
				if e.Kind == kind {
					return e
				}
			case <-ctx.Done():
				t.Fatalf("no %s event", kind)
			}
		}
	}

	waiting := next(runevents.AwaitingApproval)
	var asked struct{ Call, Tool string }
	require.NoError(t, json.Unmarshal(waiting.Data, &asked))
	assert.Equal(t, "wire", asked.Tool)
	assert.Zero(t, wires.Load(), "nothing is sent before the approval")
	status, listed := call(t, "GET", base+"/v1/approvals", key, "")
	require.Equal(t, http.StatusOK, status)
	require.Len(t, listed["approvals"], 1)

	status, decided := call(t, "POST", base+"/v1/runs/api-e2e/approvals/"+asked.Call+"/approve", key, `{"reason": "invoice 42"}`)
	require.Equal(t, http.StatusOK, status, "%v", decided)
	assert.Equal(t, "support-app", decided["decided_by"])

	finished := next(runevents.RunFinished)
	var ending struct{ Status, Answer string }
	require.NoError(t, json.Unmarshal(finished.Data, &ending))
	assert.Equal(t, "completed", ending.Status)
	assert.Equal(t, "paid", ending.Answer)
	_, open := <-events
	assert.False(t, open, "the stream ends after run_finished")
	assert.Equal(t, int32(1), wires.Load(), "the approved wire went out once")

	status, got := call(t, "GET", base+"/v1/runs/api-e2e", key, "")
	require.Equal(t, http.StatusOK, status)
	assert.Equal(t, "completed", got["status"])
	assert.Equal(t, "paid", got["answer"])
	status, second := call(t, "POST", base+"/v1/runs/api-e2e/approvals/"+asked.Call+"/deny", key, `{"reason": "too late"}`)
	require.Equal(t, http.StatusConflict, status, "%v", second)
	assert.Contains(t, second["detail"], "already approved by support-app")
}
