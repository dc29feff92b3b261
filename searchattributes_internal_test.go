package agentsaga

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// The wait retries a check that may pass later until it passes, gives up
// after its bound with the check's own error (which names the attribute),
// and stops at once on an error that will not pass.
func TestWaitUntilUsableRetriesWithinItsBound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	refused := func(calls *int, failures int) func(context.Context) error {
		return func(context.Context) error {
			*calls++
			if *calls <= failures {
				return &notUsableYet{fmt.Errorf("search attribute AgentStatus is registered in namespace n but a start with it is refused: %s",
					"Namespace n has no mapping defined for search attribute AgentStatus")}
			}
			return nil
		}
	}
	calls := 0
	if err := waitUntilUsable(ctx, 10*time.Second, refused(&calls, 3)); err != nil || calls != 4 {
		t.Fatalf("refused three times, then accepted: got %v after %d checks", err, calls)
	}

	calls = 0
	start := time.Now()
	err := waitUntilUsable(ctx, 500*time.Millisecond, refused(&calls, 1000))
	if err == nil || !strings.Contains(err.Error(), "AgentStatus") || !strings.Contains(err.Error(), "after 500ms") {
		t.Fatalf("never accepted: got %v; want an error naming AgentStatus and the bound", err)
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second || calls < 2 {
		t.Fatalf("gave up after %s and %d checks; want within the bound, after retrying", elapsed, calls)
	}

	calls = 0
	denied := errors.New("permission denied")
	err = waitUntilUsable(ctx, 10*time.Second, func(context.Context) error { calls++; return denied })
	if !errors.Is(err, denied) || calls != 1 {
		t.Fatalf("a refusal that will not pass: got %v after %d checks; want it at once", err, calls)
	}
}

// The attribute a server's refusal names is the one the error names.
func TestNamedAttribute(t *testing.T) {
	t.Parallel()
	if got := namedAttribute("Namespace n has no mapping defined for search attribute StepsUsed"); got != "StepsUsed" {
		t.Fatalf("got %q", got)
	}
	if got := namedAttribute("something else"); !strings.Contains(got, "AgentStatus") || !strings.Contains(got, ", ") {
		t.Fatalf("no name in the message: got %q, want all of them", got)
	}
}
