package main

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/runevents"
)

// The live page of a queued run says so: its status, its place, estimate
// and why it waits, in one entry that the run's later asks bring up to
// date; then that it was admitted, and its status is running.
func TestTheLivePageShowsAQueuedRun(t *testing.T) {
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Skipf("chromium is not installed: run `make chromium` (%v)", err)
	}
	base, key, store := apiWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db := ledgerdb.Of(store)
	spec, err := json.Marshal(map[string]any{"goal": "wait my turn", "budget": map[string]any{"account": "acme", "usd": 0.5}})
	require.NoError(t, err)
	require.NoError(t, db.StartRun(ctx, agentsagatype.Run{WorkflowID: "page-queued", RunID: "r", Goal: "wait my turn", Spec: spec}))
	reason := "account acme has $0.1000 of its $1.0000 per day spend cap for runs"
	require.NoError(t, db.SetRunStatus(ctx, "page-queued", agentsagatype.RunQueued, "queued: place 2 in the admission queue of account acme: "+reason))
	log := runevents.New(db.Pool())
	publish := func(key, kind string, data any) {
		raw, err := json.Marshal(data)
		require.NoError(t, err)
		_, err = log.Publish(ctx, "page-queued", runevents.Event{Key: key, Kind: kind, Data: raw})
		require.NoError(t, err)
	}
	publish("page-queued/queued", runevents.Queued, map[string]any{"status": "queued", "place": 2, "reason": reason, "estimate_usd": 0.5})

	browser := openPage(ctx, t, base+"/runs/page-queued", key)
	page := waitForPage(browser, t, "the queued run", func(s pageSnapshot) bool { return strings.Contains(s.Body, "place 2") })
	assert.Equal(t, "queued", page.Status)
	assert.Contains(t, page.Body, "place 2 in its account's admission queue, estimated at $0.5000: "+reason)

	// The run asks again: its place moved; the same entry says so.
	publish("page-queued/status/1", runevents.QuotaWait, map[string]any{"status": "queued",
		"detail": "queued: place 1 in the admission queue of account acme (priority 3, estimated at $0.5000): " + reason})
	page = waitForPage(browser, t, "the queued run's new place", func(s pageSnapshot) bool { return strings.Contains(s.Body, "place 1") })
	assert.NotContains(t, page.Body, "place 2", "one entry, brought up to date")
	assert.Equal(t, 1, strings.Count(strings.ToLower(page.Body), "queued: place"))

	publish("page-queued/admitted", runevents.Admitted, map[string]any{"status": "admitted", "estimate_usd": 0.5})
	publish("page-queued/status/2", runevents.Parked, map[string]any{"status": "running", "detail": "admitted after waiting in the queue of account acme"})
	page = waitForPage(browser, t, "the admitted run", func(s pageSnapshot) bool { return strings.Contains(s.Body, "its first turn follows") })
	assert.Equal(t, "running", page.Status)
	assert.Contains(t, page.Body, "admitted: its first turn follows; $0.5000 of its account's caps is reserved for it")
	assert.NotContains(t, page.Body, "admitted after waiting", "the admission is said once")
}
