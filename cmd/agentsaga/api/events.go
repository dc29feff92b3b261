package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	sse "github.com/tmaxmax/go-sse"

	"github.com/agentsaga/agentsaga/cmd/agentsaga/apikeys"
	"github.com/agentsaga/agentsaga/internal/runevents"
)

// errStreamDone ends a stream once the run's ending is sent.
var errStreamDone = errors.New("the run ended")

// errKeyRevoked ends a stream whose key was revoked while it was open:
// the client's reconnection is then refused as any request of that key.
var errKeyRevoked = errors.New("the stream's key was revoked")

// errRunEnded stops following a run whose ledger row says it ended, for
// when its run_finished event never came (a publish is at least once for
// the watchers' sake only: one that fails costs them, not the run).
var errRunEnded = errors.New("the ledger says the run ended")

// events is GET /v1/runs/{id}/events: the run's event log as Server-Sent
// Events, from the start, or after the seq a reconnecting client names in
// Last-Event-ID (or ?after=). Each event's id is its seq, its event name
// its kind, its data the event as JSON. The stream ends after the
// run_finished event; a run that has ended with nothing after the seq
// asked for is answered 204, which tells an EventSource not to reconnect.
func (s *Server) events(w http.ResponseWriter, r *http.Request, key apikeys.Key) error {
	q, p := onlyParams(r, "after")
	if p != nil {
		return p
	}
	after, p := afterSeq(r, q.Get("after"))
	if p != nil {
		return p
	}
	id := r.PathValue("id")
	run, err := s.visibleRun(r.Context(), key, id)
	if err != nil {
		return err
	}
	if run.FinishedAt != nil {
		next, err := s.log.Read(r.Context(), id, after, 1)
		if err != nil {
			return err
		}
		if len(next) == 0 {
			w.WriteHeader(http.StatusNoContent)
			return nil
		}
	}
	session, err := sse.Upgrade(w, r)
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no") // nginx: pass each event on as it comes
	var mu sync.Mutex
	send := func(m *sse.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if err := session.Send(m); err != nil {
			return err
		}
		return session.Flush()
	}
	open := &sse.Message{Retry: 2 * time.Second}
	open.AppendComment("run " + id)
	if err := send(open); err != nil {
		return nil // the client has gone
	}

	ctx, cancel := context.WithCancelCause(r.Context())
	var beating sync.WaitGroup
	defer func() {
		cancel(nil)
		// A beat must not be sent once the handler has returned: the
		// response is gone then, and a flush of it panicked a CI run.
		beating.Wait()
	}()
	token, _ := bearer(r)
	beating.Add(1)
	go func() {
		defer beating.Done()
		s.heartbeat(ctx, cancel, id, token, run.FinishedAt != nil, send)
	}()
	last := after
	each := func(e runevents.Event) error {
		data, err := json.Marshal(e)
		if err != nil {
			return err
		}
		m := &sse.Message{ID: sse.ID(strconv.FormatInt(e.Seq, 10))}
		if kind, err := sse.NewType(e.Kind); err == nil {
			m.Type = kind
		}
		m.AppendData(string(data))
		if err := send(m); err != nil {
			return err
		}
		last = e.Seq
		if e.Kind == runevents.RunFinished {
			return errStreamDone
		}
		return nil
	}
	err = s.feed.Follow(ctx, id, after, each)
	if errors.Is(context.Cause(ctx), errRunEnded) && r.Context().Err() == nil {
		// What was published before the ending, then the stream ends.
		for err == nil {
			var page []runevents.Event
			if page, err = s.log.Read(r.Context(), id, last, 500); err != nil || len(page) == 0 {
				break
			}
			for _, e := range page {
				if err = each(e); err != nil {
					break
				}
			}
		}
	}
	if errors.Is(context.Cause(ctx), errKeyRevoked) {
		s.cfg.Logger.Info("api: event stream ended: its key was revoked", "run", id, "key", key.Name)
		return nil
	}
	if err != nil && !errors.Is(err, errStreamDone) && r.Context().Err() == nil {
		s.cfg.Logger.Warn("api: event stream ended early", "run", id, "error", err)
	}
	return nil // the stream has begun: nothing else can be answered
}

// heartbeat sends a comment every Heartbeat while the stream is idle, so
// that proxies keep it open; ends the stream (errKeyRevoked) once the
// stream's key is no longer live, so a revoked key reads nothing more a
// beat later; and ends it (errRunEnded) once the ledger says the run
// ended: after one more beat, so that the run_finished event its ending
// publishes is read first when it comes.
func (s *Server) heartbeat(ctx context.Context, stop context.CancelCauseFunc, id, token string, ended bool, send func(*sse.Message) error) {
	tick := time.NewTicker(s.cfg.Heartbeat)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if ended {
			stop(errRunEnded)
			return
		}
		if live, err := s.keys.StillLive(ctx, token); err == nil && !live {
			stop(errKeyRevoked)
			return
		} // (a ledger that cannot answer now ends nothing: the next beat asks again)
		beat := &sse.Message{}
		beat.AppendComment("keep-alive")
		if err := send(beat); err != nil {
			stop(err)
			return
		}
		if run, err := s.db.GetRun(ctx, id); err == nil && run.FinishedAt != nil {
			ended = true
		}
	}
}

// afterSeq is where a stream starts: after the Last-Event-ID a
// reconnecting client sends, else after ?after=, else from the start.
func afterSeq(r *http.Request, param string) (int64, *Problem) {
	what, v := "?after=", param
	if h := r.Header.Get("Last-Event-ID"); h != "" {
		what, v = "Last-Event-ID", h
	}
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, badRequest("%s %q: give the seq of the last event read, a whole number of 0 or more", what, v)
	}
	return n, nil
}
