package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"

	"github.com/agentsaga/agentsaga/cmd/agentsaga/apikeys"
	"github.com/agentsaga/agentsaga/internal/webhooks"
)

// maxWebhookBytes bounds a webhook endpoint's body.
const maxWebhookBytes = 64 << 10

// The webhook routes (issue 44, docs/webhooks.md), under the scope
// webhooks:manage. A key bound to an account manages the endpoints of its
// account and sub-accounts only; an endpoint it makes hears its account
// unless it names a sub-account. allow_private is the CLI's alone: a key
// that could point the fleet's workers at private addresses could use
// them to reach what the network keeps from the outside.
func (s *Server) handleWebhooks() {
	s.handle("POST /v1/webhooks", apikeys.WebhooksManage, s.createWebhook)
	s.handle("GET /v1/webhooks", apikeys.WebhooksManage, s.listWebhooks)
	s.handle("DELETE /v1/webhooks/{id}", apikeys.WebhooksManage, s.webhookAction(s.webhooks.Delete, "deleted"))
	s.handle("POST /v1/webhooks/{id}/enable", apikeys.WebhooksManage, s.webhookAction(s.webhooks.Enable, "enabled"))
	s.handle("POST /v1/webhooks/{id}/rotate", apikeys.WebhooksManage, s.rotateWebhook)
	s.handle("GET /v1/webhooks/deliveries", apikeys.WebhooksManage, s.listDeliveries)
	s.handle("POST /v1/webhooks/deliveries/{id}/redeliver", apikeys.WebhooksManage, s.webhookAction(s.webhooks.Redeliver, "redelivering"))
}

func (s *Server) createWebhook(w http.ResponseWriter, r *http.Request, key apikeys.Key) error {
	if _, p := onlyParams(r); p != nil {
		return p
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxWebhookBytes))
	if err != nil {
		return err
	}
	var n webhooks.NewEndpoint
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&n); err != nil {
		return badRequest("the body does not fit a webhook endpoint (url, events, account, format, redact): %v", err)
	}
	if n.AllowPrivate {
		return problem(http.StatusForbidden, "forbidden", "Forbidden",
			"allow_private is set from the CLI only (agentsaga webhooks create --allow-private): over HTTP it would let a key reach private addresses")
	}
	if n.Account == "" {
		n.Account = key.Account
	}
	if !key.Sees(n.Account) {
		return problem(http.StatusForbidden, "forbidden", "Forbidden", "the key %q may not manage the webhooks of account %q", key.Name, n.Account)
	}
	if err := n.Validate(); err != nil {
		return badRequest("%v", err)
	}
	n.CreatedBy = key.Name
	e, err := s.webhooks.Create(r.Context(), n)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, e)
	return nil
}

func (s *Server) listWebhooks(w http.ResponseWriter, r *http.Request, key apikeys.Key) error {
	if _, p := onlyParams(r); p != nil {
		return p
	}
	list, err := s.webhooks.List(r.Context(), key.Account)
	if err != nil {
		return err
	}
	if list == nil {
		list = []webhooks.Endpoint{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"webhooks": list})
	return nil
}

func (s *Server) rotateWebhook(w http.ResponseWriter, r *http.Request, key apikeys.Key) error {
	if _, p := onlyParams(r); p != nil {
		return p
	}
	e, err := s.webhooks.Rotate(r.Context(), key.Account, r.PathValue("id"))
	if errors.Is(err, webhooks.ErrNotFound) {
		return webhookNotFound(r.PathValue("id"))
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, e)
	return nil
}

// webhookAction is a route that does one thing to the endpoint or
// delivery {id} the key sees.
func (s *Server) webhookAction(do func(ctx context.Context, scope, id string) error, done string) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, key apikeys.Key) error {
		if _, p := onlyParams(r); p != nil {
			return p
		}
		id := r.PathValue("id")
		err := do(r.Context(), key.Account, id)
		switch {
		case errors.Is(err, webhooks.ErrNotFound):
			return webhookNotFound(id)
		case err != nil && !errors.Is(err, r.Context().Err()):
			return problem(http.StatusConflict, "conflict", "Conflict", "%v", err)
		case err != nil:
			return err
		}
		writeJSON(w, http.StatusOK, map[string]any{"id": id, "status": done})
		return nil
	}
}

func (s *Server) listDeliveries(w http.ResponseWriter, r *http.Request, key apikeys.Key) error {
	q, p := onlyParams(r, "endpoint", "run", "limit")
	if p != nil {
		return p
	}
	f := webhooks.Filter{Scope: key.Account, Endpoint: q.Get("endpoint"), Run: q.Get("run"), Limit: 100, Attempts: true}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return badRequest("limit %q: give a number from 1 to 1000", v)
		}
		f.Limit = n
	}
	list, err := s.webhooks.Deliveries(r.Context(), f)
	if err != nil {
		return err
	}
	if list == nil {
		list = []webhooks.Delivery{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"deliveries": list})
	return nil
}

// webhookNotFound answers an endpoint or a delivery that does not exist
// or that the key may not see, alike.
func webhookNotFound(id string) *Problem {
	return problem(http.StatusNotFound, "not-found", "Not found", "no webhook endpoint or delivery %q that this key may see", id)
}
