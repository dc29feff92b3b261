package api

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/cmd/agentsaga/apikeys"
	"github.com/agentsaga/agentsaga/internal/runevents"
	"github.com/agentsaga/agentsaga/internal/webhooks"
)

// A key with webhooks:manage makes an endpoint of its account (the secret
// in the answer), lists, rotates and deletes it, and reads and redelivers
// its deliveries; another account's key sees none of it; allow_private
// and a private target are refused; a key without the scope is 403.
func TestWebhooksOverHTTP(t *testing.T) {
	w := newWorld(t)
	acme := w.key("acme-ops", "acme", apikeys.WebhooksManage)
	globex := w.key("globex-ops", "globex", apikeys.WebhooksManage)
	reader := w.key("reader", "acme", apikeys.RunsRead)

	a := w.do("GET", "/v1/webhooks", reader, "")
	require.Equal(t, http.StatusForbidden, a.status, string(a.body))
	a = w.do("POST", "/v1/webhooks", acme, `{"url": "https://hooks.example.com/x", "events": ["run.escalated"], "allow_private": true}`)
	require.Equal(t, http.StatusForbidden, a.status, string(a.body))
	a = w.do("POST", "/v1/webhooks", acme, `{"url": "http://10.0.0.1/x", "events": ["run.escalated"]}`)
	require.Equal(t, http.StatusBadRequest, a.status, string(a.body))
	a = w.do("POST", "/v1/webhooks", acme, `{"url": "https://hooks.example.com/x", "events": ["run.escalated"], "account": "globex"}`)
	require.Equal(t, http.StatusForbidden, a.status, string(a.body))
	a = w.do("POST", "/v1/webhooks", acme, `{"url": "https://hooks.example.com/x", "events": ["run.escalated"], "secret": "mine"}`)
	require.Equal(t, http.StatusBadRequest, a.status, string(a.body))

	a = w.do("POST", "/v1/webhooks", acme, `{"url": "https://hooks.example.com/x", "events": ["run.escalated", "approval.waiting"], "format": "slack"}`)
	require.Equal(t, http.StatusCreated, a.status, string(a.body))
	var e webhooks.Endpoint
	require.NoError(t, json.Unmarshal(a.body, &e))
	assert.Equal(t, "acme", e.Account, "the key's account")
	assert.Equal(t, "acme-ops", e.CreatedBy)
	require.NotEmpty(t, e.Secret)

	var list struct{ Webhooks []webhooks.Endpoint }
	a = w.do("GET", "/v1/webhooks", acme, "")
	require.Equal(t, http.StatusOK, a.status, string(a.body))
	require.NoError(t, json.Unmarshal(a.body, &list))
	require.Len(t, list.Webhooks, 1)
	assert.Empty(t, list.Webhooks[0].Secret)
	a = w.do("GET", "/v1/webhooks", globex, "")
	require.NoError(t, json.Unmarshal(a.body, &list))
	require.Empty(t, list.Webhooks, "another account's key sees none")

	w.run("wf-1", "acme/support")
	_, err := runevents.New(w.db.Pool()).Publish(context.Background(), "wf-1",
		runevents.Event{Key: "k", Kind: runevents.Escalated, Data: json.RawMessage(`{"detail": "stuck"}`)})
	require.NoError(t, err)
	var ds struct{ Deliveries []webhooks.Delivery }
	a = w.do("GET", "/v1/webhooks/deliveries?run=wf-1", acme, "")
	require.Equal(t, http.StatusOK, a.status, string(a.body))
	require.NoError(t, json.Unmarshal(a.body, &ds))
	require.Len(t, ds.Deliveries, 1)
	id := ds.Deliveries[0].ID
	a = w.do("GET", "/v1/webhooks/deliveries?run=wf-1", globex, "")
	require.NoError(t, json.Unmarshal(a.body, &ds))
	require.Empty(t, ds.Deliveries)
	a = w.do("POST", "/v1/webhooks/deliveries/"+id+"/redeliver", globex, "")
	require.Equal(t, http.StatusNotFound, a.status, string(a.body))
	a = w.do("POST", "/v1/webhooks/deliveries/"+id+"/redeliver", acme, "")
	require.Equal(t, http.StatusOK, a.status, string(a.body))

	a = w.do("POST", "/v1/webhooks/"+e.ID+"/rotate", globex, "")
	require.Equal(t, http.StatusNotFound, a.status, string(a.body))
	a = w.do("POST", "/v1/webhooks/"+e.ID+"/rotate", acme, "")
	require.Equal(t, http.StatusOK, a.status, string(a.body))
	var rotated webhooks.Endpoint
	require.NoError(t, json.Unmarshal(a.body, &rotated))
	assert.NotEqual(t, e.Secret, rotated.Secret)

	a = w.do("DELETE", "/v1/webhooks/"+e.ID, globex, "")
	require.Equal(t, http.StatusNotFound, a.status, string(a.body))
	a = w.do("DELETE", "/v1/webhooks/"+e.ID, acme, "")
	require.Equal(t, http.StatusOK, a.status, string(a.body))
	a = w.do("POST", "/v1/webhooks/"+e.ID+"/enable", acme, "")
	require.Equal(t, http.StatusNotFound, a.status, string(a.body))
}
