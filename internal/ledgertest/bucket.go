package ledgertest

import (
	"context"
	"fmt"

	"github.com/agentsaga/agentsaga/internal/ledgerdb"
)

// The fleet bucket read and spent directly, for tests: production code pays
// through agentsaga_retry_decide (ledgerdb.Store.DecideRetry).

// TakeRetryToken takes one token from the bucket if it holds one after
// refill, and reports whether it did. It is not idempotent; retry hooks use
// DecideRetry. A bucket that does not exist grants nothing.
func TakeRetryToken(ctx context.Context, store *ledgerdb.Store, name string) (bool, error) {
	var ok bool
	if err := store.Pool().QueryRow(ctx, `SELECT agentsaga_bucket_take($1, 1)`, name).Scan(&ok); err != nil {
		return false, fmt.Errorf("ledgertest: take retry token from %s: %w", name, err)
	}
	return ok, nil
}

// BucketLevel returns the bucket's level now, refill included.
func BucketLevel(ctx context.Context, store *ledgerdb.Store, name string) (float64, error) {
	var level *float64
	if err := store.Pool().QueryRow(ctx, `SELECT agentsaga_bucket_level($1)`, name).Scan(&level); err != nil {
		return 0, fmt.Errorf("ledgertest: level of bucket %s: %w", name, err)
	}
	if level == nil {
		return 0, fmt.Errorf("ledgertest: level of bucket %s: %w", name, ledgerdb.ErrNotFound)
	}
	return *level, nil
}
