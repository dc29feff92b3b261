package bench

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/agentsaga/agentsaga"
)

// The baselines are what a user would write without agentsaga: the same
// HTTP call as an activity, retried by whatever layers they stacked.

// BaselineInput configures one baseline run.
type BaselineInput struct {
	URL   string `json:"url"`
	Calls int    `json:"calls"`
	// ClientRetries and WrapperRetries are retry loops inside the activity
	// (an SDK's own retries, a retry decorator around the call).
	ClientRetries  int `json:"client_retries"`
	WrapperRetries int `json:"wrapper_retries"`
	// MaxAttempts is Temporal's per-activity cap; 0 is its default
	// (unbounded), bounded here only by ScheduleToClose.
	MaxAttempts     int32         `json:"max_attempts"`
	ScheduleToClose time.Duration `json:"schedule_to_close"`
	// Until, when set, stops making calls at this time.
	Until time.Time `json:"until,omitempty"`
}

// BaselineWorkflow makes Calls calls, one after another, each an activity
// with the baseline's retry policy. A failed call is logged and the run
// goes on, as an agent loop would.
func BaselineWorkflow(ctx workflow.Context, in BaselineInput) (int, error) {
	failed := 0
	for i := range in.Calls {
		if !in.Until.IsZero() && workflow.Now(ctx).After(in.Until) {
			break
		}
		actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			ActivityID:             fmt.Sprintf("call-%d", i+1),
			StartToCloseTimeout:    10 * time.Second,
			ScheduleToCloseTimeout: in.ScheduleToClose,
			RetryPolicy: &temporal.RetryPolicy{
				InitialInterval: 100 * time.Millisecond, BackoffCoefficient: 2, MaximumInterval: time.Second,
				MaximumAttempts: in.MaxAttempts,
			},
		})
		if err := workflow.ExecuteActivity(actx, BaselineCall, in).Get(ctx, nil); err != nil {
			failed++
		}
	}
	return failed, nil
}

// BaselineCall is one call through the stacked in-process retry loops.
func BaselineCall(ctx context.Context, in BaselineInput) error {
	info := activity.GetInfo(ctx)
	key := agentsaga.CallKey(ctx) // the key agentsaga would send: workflow ID + "/" + activity ID
	// Every request of this activity attempt, however many the in-process
	// layers make, carries the activity's attempt number.
	attempt := strconv.Itoa(int(info.Attempt))
	var err error
	for range in.WrapperRetries + 1 {
		for range in.ClientRetries + 1 {
			if err = post(ctx, in.URL, key, attempt); err == nil {
				return nil
			}
		}
	}
	return err
}

func post(ctx context.Context, url, key, attempt string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set(AttemptHeader, attempt)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return nil
}
