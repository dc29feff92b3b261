package workflows

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The book counts the wall clock a wait took once, however many calls
// waited together, gives an escalation's time to the cause that led to
// it, and names the largest cause first.
func TestWaitBookNamesWhatTookTheWallClock(t *testing.T) {
	at := func(s int) time.Time {
		return time.Date(2026, 12, 3, 16, 38, 0, 0, time.UTC).Add(time.Duration(s) * time.Second)
	}
	var b waitBook
	require.Empty(t, b.spent("it"), "no waits")

	// Two calls of one turn parked behind crm's breaker from 14 s to 74 s.
	b.add("tool crm", at(14), at(74), 12, at(14))
	b.add("tool crm", at(15), at(74), 12, at(14))
	// The quota held a model turn back 20 s.
	b.add("the quota of the model openai:gpt-4o", at(80), at(100), 4, time.Time{})
	require.InDelta(t, 80, b.Seconds, 1e-9, "overlapping waits count once")

	// crm is down again; the call stops waiting and asks a human, who
	// answers 100 s later.
	b.add("tool crm", at(110), at(150), 8, at(105))
	b.stoppedWaiting("The circuit breaker for tool crm is open until ...", "tool crm")
	b.escalated("The circuit breaker for tool crm is open until ...", at(150), at(250))
	// A refusal escalates: its human wait is a cause of its own.
	b.escalated("The model refused at step 9", at(260), at(265))
	require.Equal(t, "225 s of it went waiting: 200 s for tool crm (breaker open since 16:39:45Z, 32 waits, escalated once), "+
		"20 s for the quota of the model openai:gpt-4o (4 waits), 5 s for a human to answer an escalation (escalated once)", b.spent("it"))

	b.GivenBack = 42.4
	require.Contains(t, b.spent("it"), "; the 42 s spent waiting for approval were given back")

	var one waitBook
	one.add("tool fetch", at(0), at(30), 6, at(0))
	require.Equal(t, "30 s of the wall clock went waiting for tool fetch (breaker open since 16:38:00Z, 6 waits)", one.spent("the wall clock"))
}
