package lease

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
)

// A worker paused (SIGSTOP) between its claim and its call wakes with a
// lapsed lease. If another attempt took the key meanwhile, confirm refuses
// before anything is sent; if nobody did, it renews and goes on.
func TestConfirmAfterAPauseLongerThanTheLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	req := func(id string) ledgerdb.ActionRequest {
		return ledgerdb.ActionRequest{Key: "wf/" + id, WorkflowID: "wf", ActivityID: id, Tool: "t", Arguments: "{}"}
	}
	const lease = 100 * time.Millisecond

	// Taken over while paused.
	paused, err := store.ClaimAction(ctx, req("a"), lease)
	require.NoError(t, err)
	claimedAt := time.Now()
	time.Sleep(2 * lease)
	_, err = store.ClaimAction(ctx, req("a"), time.Minute) // the attempt that took over
	require.NoError(t, err)
	held := &Held{store: store, key: "wf/a", claim: paused.Action.Attempts, length: lease, validUntil: claimedAt.Add(lease)}
	held.ctx, held.cancel = context.WithCancelCause(ctx)
	require.ErrorIs(t, held.Confirm(), ledgerdb.ErrLeaseLost)
	assert.ErrorIs(t, context.Cause(held.ctx), ledgerdb.ErrLeaseLost, "the attempt's context ends with the cause")

	// Nobody came: the lease is renewed and the attempt may act.
	alone, err := store.ClaimAction(ctx, req("b"), lease)
	require.NoError(t, err)
	claimedAt = time.Now()
	time.Sleep(2 * lease)
	held = &Held{store: store, key: "wf/b", claim: alone.Action.Attempts, length: time.Minute, validUntil: claimedAt.Add(lease)}
	held.ctx, held.cancel = context.WithCancelCause(ctx)
	require.NoError(t, held.Confirm())
	action, err := store.GetAction(ctx, "wf/b")
	require.NoError(t, err)
	assert.True(t, action.LockedUntil.After(time.Now().Add(30*time.Second)), "renewed from now")
}
