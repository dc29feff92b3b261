package keyed

import (
	"context"

	"go.temporal.io/sdk/activity"

	"github.com/agentsaga/agentsaga/internal/activityid"
)

// CallKey is the idempotency key of the running activity: workflow ID +
// "/" + the activity ID the workflow set explicitly. It never involves the
// run ID or the attempt, so every attempt and every retry of the run
// shares it. A call the workflow sends again under a new activity ID (a
// call parked behind an open breaker) carries its first activity's key
// instead (WithCallKey), and that key is the one every part of the attempt
// uses. It is here, not in package activities, so that the one public
// reading of it is the root package's CallKey.
func CallKey(ctx context.Context) string {
	if key, ok := ctx.Value(callKeyContext{}).(string); ok {
		return key
	}
	info := activity.GetInfo(ctx)
	return activityid.Key(info.WorkflowExecution.ID, info.ActivityID)
}

type callKeyContext struct{}

// WithCallKey makes key the attempt's idempotency key when the request
// names one (wire.ToolCallRequest.Key, wire.ModelCall.Key).
func WithCallKey(ctx context.Context, key string) context.Context {
	if key == "" {
		return ctx
	}
	return context.WithValue(ctx, callKeyContext{}, key)
}
