package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/agentsagatest"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
)

// show prints the quotas of the run's models: what is left of each limit,
// the turns waiting and the waits, and --json carries the same with null
// where nothing is limited.
func TestShowPrintsTheRunsQuotas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgerdb.Of(agentsagatest.NewLedger(t))
	// A quota's key is provider:model:the first 12 hex digits of the API
	// key's SHA-256, as show prints it.
	const key = "openai:gpt-4o-mini:5cef12920560"
	require.NoError(t, store.EnsureQuota(ctx, key, agentsagatype.RateLimit{RequestsPerMinute: 120, Concurrency: 4}))
	require.NoError(t, store.EnsureQuota(ctx, "openai:gpt-4o:5cef12920560", agentsagatype.RateLimit{RequestsPerMinute: 9}))
	spec := `{"goal":"g","model":{"provider":"openai","name":"gpt-4o-mini"}}`
	require.NoError(t, store.StartRun(ctx, agentsagatype.Run{WorkflowID: "show-quota", RunID: "r", Goal: "g", Spec: []byte(spec)}))

	var text strings.Builder
	require.NoError(t, showRun(ctx, &text, store, "show-quota", false))
	assert.Contains(t, text.String(), "quota "+key+": requests 120 left of 120 a minute, 0 of 4 in flight; 0 turns waiting, 0 waits (0s in all), 0 answered 429\n")
	assert.NotContains(t, text.String(), "gpt-4o:", "another model's quota is not the run's")
	assert.NotContains(t, text.String(), "sk-show", "the key itself never shows")

	var doc strings.Builder
	require.NoError(t, showRun(ctx, &doc, store, "show-quota", true))
	var parsed struct {
		Quotas []map[string]any `json:"quotas"`
	}
	require.NoError(t, json.Unmarshal([]byte(doc.String()), &parsed))
	require.Len(t, parsed.Quotas, 1)
	assert.Equal(t, key, parsed.Quotas[0]["Key"])
	assert.InDelta(t, 120, parsed.Quotas[0]["Requests"], 1)
	assert.Nil(t, parsed.Quotas[0]["Tokens"], "not limited")
}
