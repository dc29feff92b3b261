package ledgerdb

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// StartClaim is what an Idempotency-Key of the HTTP API's POST /v1/runs
// is bound to: the request it first came with (a hash of it) and the
// workflow ID chosen for that request.
type StartClaim struct {
	WorkflowID  string
	RequestHash []byte
	// New says this claim made the binding; otherwise an earlier request
	// under the same key did, and WorkflowID and RequestHash are its.
	New bool
}

// ClaimStart binds principal's idempotency key to a request (its hash) and
// the workflow ID it is to start, unless the key is bound already (in the
// last 24 hours): then it returns that binding. Several processes may
// claim the same key at once; one binding wins and all of them read it.
func (s *Store) ClaimStart(ctx context.Context, principal, key string, requestHash []byte, workflowID string) (StartClaim, error) {
	// A statement's snapshot may not show the binding a concurrent claim
	// committed while this one waited on it (the INSERT saw it, the SELECT
	// cannot): then it returns no row, and a second statement reads it.
	for range 2 {
		var c StartClaim
		err := s.pool.QueryRow(ctx, `
			WITH claimed AS (
				INSERT INTO api_start_requests AS r (principal, idempotency_key, request_hash, workflow_id)
				VALUES ($1, $2, $3, $4)
				ON CONFLICT (principal, idempotency_key) DO UPDATE
				    SET request_hash = EXCLUDED.request_hash, workflow_id = EXCLUDED.workflow_id, created_at = now()
				    WHERE r.created_at < now() - interval '24 hours'
				RETURNING workflow_id, request_hash
			)
			SELECT workflow_id, request_hash, true FROM claimed
			UNION ALL
			SELECT workflow_id, request_hash, false FROM api_start_requests
			WHERE principal = $1 AND idempotency_key = $2 AND NOT EXISTS (SELECT 1 FROM claimed)`,
			principal, key, requestHash, workflowID).Scan(&c.WorkflowID, &c.RequestHash, &c.New)
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			return StartClaim{}, fmt.Errorf("ledger: claim idempotency key %q of %s: %w", key, principal, err)
		}
		return c, nil
	}
	return StartClaim{}, fmt.Errorf("ledger: claim idempotency key %q of %s: the binding was not found after a conflict", key, principal)
}

// ReleaseStart unbinds principal's idempotency key from workflowID: its
// start was refused (a bad spec, an ID in use), so nothing is bound to it
// and the key may be sent again with another request.
func (s *Store) ReleaseStart(ctx context.Context, principal, key, workflowID string) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM api_start_requests WHERE principal = $1 AND idempotency_key = $2 AND workflow_id = $3`,
		principal, key, workflowID)
	if err != nil {
		return fmt.Errorf("ledger: release idempotency key %q of %s: %w", key, principal, err)
	}
	return nil
}
