package ledgerdb_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
)

// A run the API starts names who started it, whether the API's row or the
// run's own first activity's came first; a run started otherwise names
// nobody, and the account is read from the spec.
func TestStartRunByRecordsWhoStarted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	spec := []byte(`{"goal":"g","budget":{"account":"acme/support"}}`)
	require.NoError(t, store.StartRunBy(ctx, agentsagatype.Run{WorkflowID: "api-first", RunID: "r1", Goal: "g", Spec: spec}, "support-app"))
	require.NoError(t, store.StartRun(ctx, agentsagatype.Run{WorkflowID: "api-first", RunID: "r1", Goal: "g", Spec: spec}))
	require.NoError(t, store.StartRun(ctx, agentsagatype.Run{WorkflowID: "activity-first", RunID: "r2", Goal: "g", Spec: spec}))
	require.NoError(t, store.StartRunBy(ctx, agentsagatype.Run{WorkflowID: "activity-first", RunID: "r2", Goal: "g", Spec: spec}, "support-app"))
	require.NoError(t, store.StartRunBy(ctx, agentsagatype.Run{WorkflowID: "activity-first", RunID: "r2", Goal: "g", Spec: spec}, "someone-else"))
	require.NoError(t, store.StartRun(ctx, agentsagatype.Run{WorkflowID: "cli", RunID: "r3", Goal: "g"}))
	for id, want := range map[string]string{"api-first": "support-app", "activity-first": "support-app", "cli": ""} {
		run, err := store.GetRun(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, want, run.StartedBy, id)
	}
	run, err := store.GetRun(ctx, "api-first")
	require.NoError(t, err)
	assert.Equal(t, "acme/support", run.Account)
}

// ListRuns filters by status, account and account tree, newest first, and
// a cursor pages through every run once.
func TestListRunsFiltersAndPages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	accounts := []string{"acme", "acme/support", "acme-corp", ""}
	for i := range 12 {
		account := accounts[i%len(accounts)]
		spec := fmt.Sprintf(`{"budget":{"account":%q}}`, account)
		require.NoError(t, store.StartRun(ctx, agentsagatype.Run{WorkflowID: fmt.Sprintf("run-%02d", i), RunID: "r", Goal: "g", Spec: []byte(spec)}))
	}
	_, err := store.Pool().Exec(ctx, `UPDATE runs SET started_at = now() - make_interval(secs => 100 - substr(workflow_id, 5)::int)`)
	require.NoError(t, err)
	require.NoError(t, store.FinishRun(ctx, "run-04", agentsagatype.RunOutcome{Status: agentsagatype.RunCompleted}))

	ids := func(runs []agentsagatype.Run) []string {
		var out []string
		for _, r := range runs {
			out = append(out, r.WorkflowID)
		}
		return out
	}
	all, err := store.ListRuns(ctx, ledgerdb.RunFilter{Limit: 100})
	require.NoError(t, err)
	require.Len(t, all, 12)
	assert.Equal(t, "run-11", all[0].WorkflowID, "newest first")
	assert.Empty(t, all[0].Spec, "a listing leaves the specs out")

	tree, err := store.ListRuns(ctx, ledgerdb.RunFilter{Under: "acme", Limit: 100})
	require.NoError(t, err)
	assert.Equal(t, []string{"run-09", "run-08", "run-05", "run-04", "run-01", "run-00"}, ids(tree))
	exact, err := store.ListRuns(ctx, ledgerdb.RunFilter{Account: "acme", Limit: 100})
	require.NoError(t, err)
	assert.Equal(t, []string{"run-08", "run-04", "run-00"}, ids(exact))
	done, err := store.ListRuns(ctx, ledgerdb.RunFilter{Status: agentsagatype.RunCompleted, Under: "acme", Limit: 100})
	require.NoError(t, err)
	assert.Equal(t, []string{"run-04"}, ids(done))
	other, err := store.ListRuns(ctx, ledgerdb.RunFilter{Account: "acme-corp", Under: "acme", Limit: 100})
	require.NoError(t, err)
	assert.Empty(t, other, "a filter never widens what the tree holds")

	var paged []string
	var after *ledgerdb.RunCursor
	for {
		page, err := store.ListRuns(ctx, ledgerdb.RunFilter{After: after, Limit: 5})
		require.NoError(t, err)
		paged = append(paged, ids(page)...)
		if len(page) < 5 {
			break
		}
		last := page[len(page)-1]
		after = &ledgerdb.RunCursor{StartedAt: last.StartedAt, WorkflowID: last.WorkflowID}
	}
	assert.Equal(t, ids(all), paged, "the pages hold every run once, in order")

	_, err = store.ListRuns(ctx, ledgerdb.RunFilter{Limit: 0})
	require.ErrorContains(t, err, "limit 0")
}

// An idempotency key binds the first request's hash and workflow ID; a
// retry reads them, claims made at once agree on one, another principal's
// key of the same name is its own, and a released key is free again.
func TestClaimStartBindsAKeyOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	first, err := store.ClaimStart(ctx, "app", "k1", []byte("h1"), "run-a")
	require.NoError(t, err)
	assert.Equal(t, ledgerdb.StartClaim{WorkflowID: "run-a", RequestHash: []byte("h1"), New: true}, first)
	again, err := store.ClaimStart(ctx, "app", "k1", []byte("h2"), "run-b")
	require.NoError(t, err)
	assert.Equal(t, ledgerdb.StartClaim{WorkflowID: "run-a", RequestHash: []byte("h1")}, again)
	other, err := store.ClaimStart(ctx, "other-app", "k1", []byte("h2"), "run-c")
	require.NoError(t, err)
	assert.True(t, other.New)

	require.NoError(t, store.ReleaseStart(ctx, "app", "k1", "run-a"))
	freed, err := store.ClaimStart(ctx, "app", "k1", []byte("h3"), "run-d")
	require.NoError(t, err)
	assert.True(t, freed.New)

	// A binding older than a day binds nothing.
	_, err = store.Pool().Exec(ctx, `UPDATE api_start_requests SET created_at = now() - interval '25 hours' WHERE idempotency_key = 'k1'`)
	require.NoError(t, err)
	stale, err := store.ClaimStart(ctx, "app", "k1", []byte("h4"), "run-e")
	require.NoError(t, err)
	assert.Equal(t, ledgerdb.StartClaim{WorkflowID: "run-e", RequestHash: []byte("h4"), New: true}, stale)

	var wg sync.WaitGroup
	won := make(chan string, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := store.ClaimStart(ctx, "app", "race", []byte("h"), fmt.Sprintf("run-%d", i))
			if assert.NoError(t, err) {
				if c.New {
					won <- c.WorkflowID
				}
				assert.NotEmpty(t, c.WorkflowID)
			}
		}()
	}
	wg.Wait()
	close(won)
	assert.Len(t, won, 1, "one claim binds the key")
	var bound string
	require.NoError(t, store.Pool().QueryRow(ctx, `SELECT workflow_id FROM api_start_requests WHERE idempotency_key = 'race'`).Scan(&bound))
	assert.Equal(t, <-won, bound)
}

// The approvals an account's key lists are its runs' and its
// sub-accounts', never another account's.
func TestAwaitingApprovalsUnderAnAccount(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	for id, account := range map[string]string{"wf-acme": "acme", "wf-sub": "acme/support", "wf-corp": "acme-corp"} {
		spec := fmt.Sprintf(`{"budget":{"account":%q}}`, account)
		require.NoError(t, store.StartRun(ctx, agentsagatype.Run{WorkflowID: id, RunID: "r", Goal: "g", Spec: []byte(spec)}))
		_, err := store.RequestApproval(ctx, agentsagatype.ApprovalRequest{Key: id + "/call", WorkflowID: id, Call: "call", Tool: "refund"})
		require.NoError(t, err)
	}
	runsOf := func(account string) []string {
		list, err := store.AwaitingApprovalsUnder(ctx, account, 10)
		require.NoError(t, err)
		var ids []string
		for _, a := range list {
			ids = append(ids, a.WorkflowID)
		}
		sort.Strings(ids)
		return ids
	}
	assert.Equal(t, []string{"wf-acme", "wf-sub"}, runsOf("acme"))
	assert.Equal(t, []string{"wf-sub"}, runsOf("acme/support"))
	assert.Equal(t, []string{"wf-acme", "wf-corp", "wf-sub"}, runsOf(""))
}
