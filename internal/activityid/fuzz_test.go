package activityid_test

import (
	"strings"
	"testing"

	"github.com/agentsaga/agentsaga/internal/activityid"
)

// FuzzCompensation checks the compensation's activity ID, from which its
// idempotency key is derived: it is the forward ID with /compensate
// appended and nothing else (so the forward ID can be read back from it),
// two forward calls never share a compensation, and a compensation never
// shares a key with its own forward call.
func FuzzCompensation(f *testing.F) {
	f.Add("run-42", "step-002-call-1-charge", "step-002-call-2-charge")
	f.Add("run-42", "step-001-call-1-charge", "step-001-call-1-charge/compensate")
	f.Add("a/b", "", "compensate")
	f.Add("", "/compensate", "")
	f.Fuzz(func(t *testing.T, workflowID, forward1, forward2 string) {
		id1, id2 := activityid.Compensation(forward1, 0), activityid.Compensation(forward2, 0)
		if back, ok := strings.CutSuffix(id1, "/compensate"); !ok || back != forward1 {
			t.Fatalf("Compensation(%q, 0) = %q: the forward ID does not read back (got %q, %v)", forward1, id1, back, ok)
		}
		if id1 == forward1 {
			t.Fatalf("Compensation(%q, 0) is the forward ID itself", forward1)
		}
		if (forward1 == forward2) != (id1 == id2) {
			t.Fatalf("forward %q and %q give compensation IDs %q and %q", forward1, forward2, id1, id2)
		}
		// The key is workflow ID + "/" + activity ID, and for a
		// compensation that is the forward key with /compensate appended.
		forwardKey := workflowID + "/" + forward1
		if key := workflowID + "/" + id1; key != forwardKey+"/compensate" || !strings.HasPrefix(key, workflowID+"/") {
			t.Fatalf("compensation key %q is not the forward key %q + /compensate", key, forwardKey)
		}
	})
}
