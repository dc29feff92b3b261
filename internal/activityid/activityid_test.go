package activityid_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/agentsaga/agentsaga/internal/activityid"
)

// The grammar is a replay contract: these are IDs the corpus's histories
// hold, and a change to any of them would give calls in flight new keys.
func TestActivityIDGrammar(t *testing.T) {
	call := activityid.Tool(3, 1, "search")
	for got, want := range map[string]string{
		activityid.Model(7):   "step-007-model",
		activityid.Finish(12): "step-012-finish",
		call:                  "step-003-call-1-search",
		activityid.Sub(call, activityid.AfterBreaker, 2):           "step-003-call-1-search/after-breaker-2",
		activityid.Sub("step-001-model", activityid.AfterQuota, 1): "step-001-model/after-quota-1",
		activityid.Sub("step-001-model", activityid.AfterSpend, 1): "step-001-model/after-spend-1",
		activityid.Sub(call, activityid.AfterSpendCap, 3):          "step-003-call-1-search/after-spend-cap-3",
		activityid.Sub("step-001-model", activityid.Fallback, 0):   "step-001-model/fallback",
		activityid.Sub(call, activityid.Limit, 1):                  "step-003-call-1-search/limit-1",
		activityid.Sub(call, activityid.Approval, 0):               "step-003-call-1-search/approval",
		activityid.Sub(call, activityid.ApprovalTimer, 0):          "step-003-call-1-search/approval-timeout",
		activityid.Sub(call, activityid.GiveUp, 0):                 "step-003-call-1-search/give-up",
		activityid.Sub(call, activityid.Compensate, 0):             "step-003-call-1-search/compensate",
		activityid.Key("refund-142", call):                         "refund-142/step-003-call-1-search",
	} {
		assert.Equal(t, want, got)
	}
}

func ExampleCompensation() {
	// The workflow runs a compensation under this activity ID, so its
	// idempotency key is the forward key with /compensate appended.
	fmt.Println("run-42/" + activityid.Compensation("step-002-call-1-charge", 0))
	// Output: run-42/step-002-call-1-charge/compensate
}
