package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/agentsagatest"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/runevents"
	"github.com/agentsaga/agentsaga/internal/webhooks"
)

// An operator makes an endpoint (its secret printed once), lists it,
// sees the delivery an escalation made, sends it again, rotates the
// secret and deletes the endpoint; a private target or an unknown event
// is refused, saying why.
func TestWebhooksFromTheCLI(t *testing.T) {
	databaseURL := agentsagatest.NewDatabase(t)
	t.Setenv("DATABASE_URL", databaseURL)
	out, err := runCLI(t, "webhooks")
	require.NoError(t, err, out)
	assert.Contains(t, out, "no webhook")

	_, err = runCLI(t, "webhooks", "create", "--url", "http://169.254.169.254/latest", "--events", "run.escalated")
	require.ErrorContains(t, err, "--allow-private")
	_, err = runCLI(t, "webhooks", "create", "--url", "https://hooks.example.com/x", "--events", "run.exploded")
	require.ErrorContains(t, err, `unknown event "run.exploded"`)

	out, err = runCLI(t, "webhooks", "create", "--url", "http://127.0.0.1:9/hook", "--events", "run.escalated,approval.waiting",
		"--account", "acme", "--allow-private", "--format", "slack")
	require.NoError(t, err, out)
	secret := strings.Fields(out)[0]
	require.True(t, strings.HasPrefix(secret, "whsec_"), out)
	assert.Contains(t, out, "not shown again")

	out, err = runCLI(t, "webhooks", "--json")
	require.NoError(t, err, out)
	assert.NotContains(t, out, secret)
	var list []webhooks.Endpoint
	require.NoError(t, json.Unmarshal([]byte(out), &list), out)
	require.Len(t, list, 1)
	id := list[0].ID
	assert.Equal(t, []string{"approval.waiting", "run.escalated"}, list[0].Events)
	assert.Equal(t, "slack", list[0].Format)

	ctx := context.Background()
	store, err := ledgerdb.Open(ctx, databaseURL)
	require.NoError(t, err)
	defer store.Close()
	_, err = store.Pool().Exec(ctx, `INSERT INTO runs (workflow_id, run_id, goal, spec) VALUES ('wf-1', 'r', 'g', '{"budget": {"account": "acme/support"}}')`)
	require.NoError(t, err)
	_, err = runevents.New(store.Pool()).Publish(ctx, "wf-1", runevents.Event{Key: "k", Kind: runevents.Escalated, Data: json.RawMessage(`{"detail": "stuck"}`)})
	require.NoError(t, err)
	out, err = runCLI(t, "webhooks", "deliveries", "--run", "wf-1")
	require.NoError(t, err, out)
	assert.Contains(t, out, "run.escalated")
	assert.Contains(t, out, "pending")
	out, err = runCLI(t, "webhooks", "deliveries", "--endpoint", id, "--json")
	require.NoError(t, err, out)
	var ds []webhooks.Delivery
	require.NoError(t, json.Unmarshal([]byte(out), &ds), out)
	require.Len(t, ds, 1, "a sub-account's run is heard by its account's endpoint")
	out, err = runCLI(t, "webhooks", "redeliver", ds[0].ID)
	require.NoError(t, err, out)
	_, err = runCLI(t, "webhooks", "redeliver", "msg_nope")
	require.ErrorContains(t, err, "not found")

	out, err = runCLI(t, "webhooks", "rotate", id)
	require.NoError(t, err, out)
	assert.NotContains(t, out, secret)
	assert.Contains(t, out, "old one also signs until")
	out, err = runCLI(t, "webhooks")
	require.NoError(t, err, out)
	assert.Contains(t, out, "old secret signs until")

	out, err = runCLI(t, "webhooks", "delete", id)
	require.NoError(t, err, out)
	assert.Contains(t, out, "deleted webhook "+id)
	_, err = runCLI(t, "webhooks", "delete", id)
	require.ErrorContains(t, err, "not found")
}
