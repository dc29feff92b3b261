package api

import (
	"context"
	"errors"
	"net/http"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/cmd/agentsaga/apikeys"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
)

// listQueue is GET /v1/queue: the queued runs the key sees, in each root
// account's order (`agentsaga queue --json`). ?account= keeps those of
// an account and the accounts under it. A run's place is its place in
// its root account's queue, which runs the key does not see share.
func (s *Server) listQueue(w http.ResponseWriter, r *http.Request, key apikeys.Key) error {
	q, p := onlyParams(r, "account")
	if p != nil {
		return p
	}
	account := q.Get("account")
	if q.Has("account") {
		if p := checkID("account", account); p != nil {
			return p
		}
	}
	queued, err := s.db.ListQueue(r.Context(), account)
	if err != nil {
		return err
	}
	visible := []ledgerdb.QueuedRun{}
	for _, run := range queued {
		if key.Sees(run.Account) {
			visible = append(visible, run)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"queued": visible})
	return nil
}

// cancelQueued is POST /v1/runs/{id}/cancel-queued (`agentsaga queue
// cancel`): the run leaves its queue and ends without a turn.
func (s *Server) cancelQueued(w http.ResponseWriter, r *http.Request, key apikeys.Key) error {
	run, err := s.visibleRun(r.Context(), key, r.PathValue("id"))
	if err != nil {
		return err
	}
	if _, err := readDecision(w, r); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.DecisionTimeout)
	defer cancel()
	err = agentsaga.Get(s.cfg.Client, run.WorkflowID).WithLedger(s.cfg.Store).CancelQueued(ctx)
	switch {
	case errors.Is(err, agentsaga.ErrNotQueued):
		p := problem(http.StatusConflict, "not-queued", "Not queued",
			"run %s is %s, not waiting in an admission queue, so there is nothing to cancel", run.WorkflowID, run.Status)
		p.Run = run.WorkflowID
		return p
	case errors.Is(err, agentsaga.ErrRunNotFound):
		return notFound(run.WorkflowID)
	case err != nil:
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"run": run.WorkflowID, "cancelled": true, "by": key.Name})
	return nil
}
