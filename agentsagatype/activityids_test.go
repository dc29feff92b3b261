package agentsagatype_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/agentsaga/agentsaga/agentsagatype"
)

// The grammar is a replay contract: these are IDs the corpus's histories
// hold, and a change to any of them would give calls in flight new keys.
func TestActivityIDGrammar(t *testing.T) {
	call := agentsagatype.ToolActivityID(3, 1, "search")
	for got, want := range map[string]string{
		agentsagatype.ModelActivityID(7):   "step-007-model",
		agentsagatype.FinishActivityID(12): "step-012-finish",
		call:                               "step-003-call-1-search",
		agentsagatype.SubActivityID(call, agentsagatype.SubAfterBreaker, 2):           "step-003-call-1-search/after-breaker-2",
		agentsagatype.SubActivityID("step-001-model", agentsagatype.SubAfterQuota, 1): "step-001-model/after-quota-1",
		agentsagatype.SubActivityID("step-001-model", agentsagatype.SubAfterSpend, 1): "step-001-model/after-spend-1",
		agentsagatype.SubActivityID(call, agentsagatype.SubAfterSpendCap, 3):          "step-003-call-1-search/after-spend-cap-3",
		agentsagatype.SubActivityID("step-001-model", agentsagatype.SubFallback, 0):   "step-001-model/fallback",
		agentsagatype.SubActivityID(call, agentsagatype.SubLimit, 1):                  "step-003-call-1-search/limit-1",
		agentsagatype.SubActivityID(call, agentsagatype.SubApproval, 0):               "step-003-call-1-search/approval",
		agentsagatype.SubActivityID(call, agentsagatype.SubApprovalTimer, 0):          "step-003-call-1-search/approval-timeout",
		agentsagatype.SubActivityID(call, agentsagatype.SubGiveUp, 0):                 "step-003-call-1-search/give-up",
		agentsagatype.SubActivityID(call, agentsagatype.SubCompensate, 0):             "step-003-call-1-search/compensate",
		agentsagatype.CallKey("refund-142", call):                                     "refund-142/step-003-call-1-search",
	} {
		assert.Equal(t, want, got)
	}
}
