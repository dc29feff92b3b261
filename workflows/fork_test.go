package workflows_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/agentsaga/agentsaga/workflows"
)

// FuzzForked feeds arbitrary fork points and operator messages to
// RunSpec.Forked. A refused fork is an error that starts with "fork: ";
// an accepted one carries the step it starts at, the conversation's next
// place after the operator's message (pinned, read at that step), a
// budget that counts the steps before it and has spent nothing else, and
// survives the JSON the workflow's input is sent as.
func FuzzForked(f *testing.F) {
	f.Add("src", 4, 9, "o-2 is fine")
	f.Add("src", 1, 2, "")
	f.Add("", 3, 5, "x")
	f.Add("src", 0, 5, "")
	f.Add("src", -7, 5, "")
	f.Add("src", 3, -1, "")
	f.Add("a/b", 1<<30, 1<<30, strings.Repeat("é", 100))
	f.Add("src", 2, 3, strings.Repeat("m", 16<<10+1))
	spec, err := workflows.ParseSpec([]byte(validSpec))
	if err != nil {
		f.Fatal(err)
	}
	resolved, err := spec.Resolve()
	if err != nil {
		f.Fatal(err)
	}
	start := time.Date(2026, 12, 6, 20, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, source string, at, seq int, message string) {
		forked, err := resolved.Forked(workflows.Fork{Source: source, At: at, Seq: seq, Message: message}, start)
		if source == "" || at < 1 || seq < 0 || len(message) > 16<<10 {
			if err == nil || !strings.HasPrefix(err.Error(), "fork: ") {
				t.Fatalf("Forked(%q, %d, %d) = %v, want a fork: error", source, at, seq, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("Forked(%q, %d, %d): %v", source, at, seq, err)
		}
		c := forked.Carried
		if c == nil || c.Step != at || c.RunBudget == nil || c.RunBudget.Used.Steps != at-1 || c.RunBudget.Used.USD != 0 || !c.Deadlines {
			t.Fatalf("Forked(%q, %d, %d) carries %+v", source, at, seq, c)
		}
		wantSeq := seq
		if message != "" {
			wantSeq++
			if len(c.Pending) != 1 || c.Pending[0].Seq != seq || c.Pending[0].Content != message || !c.Pending[0].Pinned || c.Pending[0].Role != "user" {
				t.Fatalf("the operator's message is pending as %+v", c.Pending)
			}
		} else if len(c.Pending) != 0 {
			t.Fatalf("nothing pending was asked for: %+v", c.Pending)
		}
		if c.Seq != wantSeq || !c.RunBudget.Start.Equal(start) || c.Traced != 1 || c.Trace[0].Kind != "fork" {
			t.Fatalf("Forked(%q, %d, %d) carries seq %d, start %v, trace %+v", source, at, seq, c.Seq, c.RunBudget.Start, c.Trace)
		}
		encoded, err := json.Marshal(forked)
		if err != nil {
			t.Fatal(err)
		}
		var back workflows.RunSpec
		if err := json.Unmarshal(encoded, &back); err != nil {
			t.Fatalf("the fork's input does not decode: %v", err)
		}
		if back.Carried == nil || back.Carried.Step != at || back.Carried.Seq != wantSeq || back.Carried.RunBudget.Used != c.RunBudget.Used {
			t.Fatalf("the fork's state does not survive its JSON: %+v", back.Carried)
		}
	})
}
