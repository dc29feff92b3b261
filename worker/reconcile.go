package worker

import (
	"context"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/agentsaga/agentsaga"
)

// EnsureReconcilerSchedule makes sure the Temporal Schedule that runs the
// reconciler exists (agentsaga.EnsureReconcilerSchedule, which an engine
// with a Temporal client calls itself).
func EnsureReconcilerSchedule(ctx context.Context, c client.Client, queue string, every time.Duration) error {
	return agentsaga.EnsureReconcilerSchedule(ctx, c, queue, every)
}
