package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sse "github.com/tmaxmax/go-sse"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/cmd/agentsaga/apikeys"
	"github.com/agentsaga/agentsaga/internal/runevents"
)

// openStream opens a run's event stream; headers are name, value pairs.
func (w *world) openStream(ctx context.Context, path, token string, headers ...string) *http.Response {
	w.t.Helper()
	req, err := http.NewRequestWithContext(ctx, "GET", w.url+path, nil)
	require.NoError(w.t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(w.t, err)
	return res
}

// publish appends events of the given kinds to a run's log, each with
// data naming its key.
func (w *world) publish(run string, from int, kinds ...string) {
	w.t.Helper()
	var events []runevents.Event
	for i, kind := range kinds {
		key := fmt.Sprintf("e%d", from+i)
		data, _ := json.Marshal(map[string]any{"key": key, "text": "t" + key})
		events = append(events, runevents.Event{Key: key, Kind: kind, Data: data})
	}
	_, err := w.events.Publish(context.Background(), run, events...)
	require.NoError(w.t, err)
}

// A client cut part-way that reconnects with Last-Event-ID gets every
// event exactly once, in seq order: each SSE id is the seq, each event
// name the kind, each data the event; the stream ends after run_finished,
// and a reconnect after that is a 204 (an EventSource stops there).
func TestAStreamResumesFromLastEventIDExactlyOnce(t *testing.T) {
	w := newWorld(t)
	token := w.key("watcher", "acme", apikeys.RunsRead)
	w.run("streamed", "acme")
	w.publish("streamed", 1, runevents.TurnStarted, runevents.TextDelta, runevents.TextDelta, runevents.ToolStarted, runevents.ToolFinished)

	var got []runevents.Event
	read := func(res *http.Response, stopAfter int) (ended bool) {
		t.Helper()
		for e, err := range sse.Read(res.Body, nil) {
			if err != nil {
				return false
			}
			var event runevents.Event
			require.NoError(t, json.Unmarshal([]byte(e.Data), &event), e.Data)
			assert.Equal(t, strconv.FormatInt(event.Seq, 10), e.LastEventID, "the SSE id is the seq")
			assert.Equal(t, event.Kind, e.Type, "the SSE event name is the kind")
			got = append(got, event)
			if len(got) == stopAfter {
				return false
			}
		}
		return true
	}

	ctx, cut := context.WithCancel(context.Background())
	first := w.openStream(ctx, "/v1/runs/streamed/events", token)
	require.Equal(t, http.StatusOK, first.StatusCode)
	assert.Equal(t, "text/event-stream", first.Header.Get("Content-Type"))
	read(first, 3)
	cut() // the client goes away part-way, with more to read
	first.Body.Close()
	require.Len(t, got, 3)

	w.publish("streamed", 6, runevents.TextDelta, runevents.AttemptDiscarded, runevents.TextDelta)
	second := w.openStream(context.Background(), "/v1/runs/streamed/events", token, "Last-Event-ID", strconv.FormatInt(got[2].Seq, 10))
	defer second.Body.Close()
	require.Equal(t, http.StatusOK, second.StatusCode)
	done := make(chan bool, 1)
	go func() { done <- read(second, -1) }()
	// Published while the second stream follows: it is woken, not polled.
	w.publish("streamed", 9, runevents.AwaitingApproval, runevents.ApprovalDecided, runevents.RunFinished)
	select {
	case ended := <-done:
		require.True(t, ended, "the stream ends after run_finished")
	case <-time.After(20 * time.Second):
		t.Fatal("the stream did not end after run_finished")
	}
	require.Len(t, got, 11)
	for i, e := range got {
		assert.EqualValues(t, i+1, e.Seq, "every event once, in order")
		assert.Equal(t, fmt.Sprintf("e%d", i+1), e.Key)
	}
	assert.Equal(t, runevents.RunFinished, got[10].Kind)

	require.NoError(t, w.db.FinishRun(context.Background(), "streamed", agentsagatype.RunOutcome{Status: agentsagatype.RunCompleted}))
	after := w.openStream(context.Background(), "/v1/runs/streamed/events", token, "Last-Event-ID", "11")
	after.Body.Close()
	assert.Equal(t, http.StatusNoContent, after.StatusCode)
	// ?after= starts past a seq too; the header wins over it.
	got = nil
	tail := w.openStream(context.Background(), "/v1/runs/streamed/events?after=9", token)
	require.True(t, read(tail, -1))
	tail.Body.Close()
	require.Len(t, got, 2)
	assert.EqualValues(t, 10, got[0].Seq)
	got = nil
	both := w.openStream(context.Background(), "/v1/runs/streamed/events?after=1", token, "Last-Event-ID", "10")
	require.True(t, read(both, -1))
	both.Body.Close()
	require.Len(t, got, 1)
	assert.EqualValues(t, 11, got[0].Seq)
}

// An idle stream sends comments so that proxies keep it open; a run the
// ledger says ended, whose run_finished event never came, still ends its
// stream once what it published is sent.
func TestAnIdleStreamBeatsAndAnEndedRunEndsIt(t *testing.T) {
	w := newWorld(t)
	token := w.key("watcher", "", apikeys.RunsRead)
	w.run("quiet", "")
	res := w.openStream(context.Background(), "/v1/runs/quiet/events", token)
	defer res.Body.Close()
	lines := bufio.NewScanner(res.Body)
	beats := 0
	for beats < 2 && lines.Scan() {
		if strings.HasPrefix(lines.Text(), ":") && strings.Contains(lines.Text(), "keep-alive") {
			beats++
		}
	}
	require.Equal(t, 2, beats, "two heartbeats")

	w.publish("quiet", 1, runevents.TurnStarted, runevents.TextDelta)
	require.NoError(t, w.db.FinishRun(context.Background(), "quiet", agentsagatype.RunOutcome{Status: agentsagatype.RunFailed}))
	var seqs []string
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		for lines.Scan() {
			if id, ok := strings.CutPrefix(lines.Text(), "id: "); ok {
				seqs = append(seqs, id)
			}
		}
	}()
	select {
	case <-ended:
	case <-time.After(20 * time.Second):
		t.Fatal("the stream of an ended run did not end")
	}
	assert.Equal(t, []string{"1", "2"}, seqs)
}

// A stream open when its key is revoked ends within a heartbeat or two,
// and the client's reconnection is refused: a revoked key reads nothing
// more, even on a stream it opened before.
func TestARevokedKeysStreamEnds(t *testing.T) {
	w := newWorld(t)
	token := w.key("leaver", "", apikeys.RunsRead)
	w.run("long", "")
	res := w.openStream(context.Background(), "/v1/runs/long/events", token)
	defer res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	lines := bufio.NewScanner(res.Body)
	for lines.Scan() {
		if strings.Contains(lines.Text(), "keep-alive") {
			break // the stream is open and beating
		}
	}
	require.NoError(t, apikeys.New(w.db.Pool()).Revoke(t.Context(), "leaver"))
	ended := make(chan struct{})
	go func() {
		for lines.Scan() { // beats sent before the revocation was seen
		}
		close(ended)
	}()
	select {
	case <-ended:
	case <-time.After(20 * time.Second):
		t.Fatal("the stream of a revoked key did not end")
	}
	w.publish("long", 1, runevents.TurnStarted)
	again := w.openStream(context.Background(), "/v1/runs/long/events", token)
	defer again.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, again.StatusCode)
	assert.Contains(t, w.logs.String(), "its key was revoked")
}

// A client that goes away while a beat is being sent: the handler waits for
// its heartbeat before it returns, so no beat is flushed to a response that
// is gone. Before, one was, and its nil buffer's panic took the whole serve
// process down (a CI run under load met it). Beats every millisecond and
// streams closed at once make the moment common.
func TestAStreamClosedMidBeatEndsCleanly(t *testing.T) {
	w := newWorld(t, func(c *Config) { c.Heartbeat = time.Millisecond })
	token := w.key("flicker", "", apikeys.RunsRead)
	w.run("flicker", "")
	for range 100 {
		ctx, cancel := context.WithCancel(context.Background())
		res := w.openStream(ctx, "/v1/runs/flicker/events", token)
		line := bufio.NewScanner(res.Body)
		for line.Scan() && !strings.Contains(line.Text(), "keep-alive") {
		}
		cancel()
		res.Body.Close()
	}
	// The server is still there to answer.
	res := w.openStream(context.Background(), "/v1/runs/flicker/events", token)
	defer res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
}
