package webhooks_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/internal/runevents"
	"github.com/agentsaga/agentsaga/internal/webhooks"
)

// Run events become the webhook events the endpoints hear: an approval
// carries its call with its arguments redacted by the endpoint's paths,
// a run escalated or ended by its spend cap is spend.cap_reached to an
// endpoint that hears it (once, though it is run.escalated too), a run's
// other events are not sent, an account's endpoint hears its sub-accounts'
// runs only, and a Slack endpoint gets a readable {"text": ...}.
func TestRunEventsBecomeWebhooks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t)
	store := webhooks.NewStore(pool)
	_, err := pool.Exec(ctx, `INSERT INTO runs (workflow_id, run_id, goal, spec) VALUES
		('wf-acme', 'r', 'g', '{"budget": {"account": "acme/support"}}'), ('wf-other', 'r', 'g', '{"budget": {"account": "acmex"}}')`)
	require.NoError(t, err)
	rc := newReceiver(t, nil)
	slack := newReceiver(t, nil)
	all, err := store.Create(ctx, webhooks.NewEndpoint{URL: rc.URL, Events: webhooks.Events, Account: "acme",
		AllowPrivate: true, Redact: []string{"$.customer.email"}})
	require.NoError(t, err)
	_, err = store.Create(ctx, webhooks.NewEndpoint{URL: slack.URL, Events: []string{webhooks.ApprovalWaiting}, Format: webhooks.FormatSlack, AllowPrivate: true})
	require.NoError(t, err)

	log := runevents.New(pool)
	publish := func(run, key, kind string, data any) {
		raw, _ := json.Marshal(data)
		_, err := log.Publish(ctx, run, runevents.Event{Key: key, Kind: kind, Data: raw})
		require.NoError(t, err)
	}
	capped := "the spend cap of account acme ($5.00 a day) has $5.00 spent and $0.00 reserved, and the next turn needs up to $0.0100"
	publish("wf-acme", "a", runevents.AwaitingApproval, map[string]any{"key": "wf-acme/step-1/call-0", "call": "step-1/call-0",
		"tool": "pay_out", "arguments": `{"amount": 900, "customer": {"email": "ann@example.com"}}`, "why": "amount > 500", "status": "awaiting-approval"})
	publish("wf-acme", "b", runevents.TurnStarted, map[string]any{"attempt": 1}) // not a webhook
	publish("wf-acme", "c", runevents.Escalated, map[string]any{"status": "escalated", "detail": "The run's account cannot pay for its next turn: " + capped})
	publish("wf-acme", "d", runevents.QuotaWait, map[string]any{"detail": "waiting for the quota of model m"}) // not a spend cap
	publish("wf-acme", "d2", runevents.EscalationReminder, map[string]any{"of": "escalation", "why": "tool pay_out is down", "reminder": 1})
	publish("wf-acme", "d3", runevents.EscalationTimedOut, map[string]any{"of": "escalation", "why": "tool pay_out is down",
		"reason": "nobody answered the escalation within 30m (on_timeout: abort); told: 1 reminder"})
	publish("wf-acme", "e", runevents.RunFinished, map[string]any{"status": "completed", "reason": "the model answered"})
	publish("wf-other", "f", runevents.RunFinished, map[string]any{"status": "completed", "reason": "acmex is not under acme"})

	c := newClock()
	d := webhooks.NewDeliverer(pool, webhooks.Options{Clock: c.Now, Dialer: &loopbackOnly{t: t}, PublicURL: "https://agents.example.com/"})
	drain(t, d, c, time.Second, 10)

	got := rc.delivered()
	require.Len(t, got, 5)
	for _, r := range got {
		require.NoError(t, verify(t, all.Secret, r))
		require.Equal(t, "wf-acme", r.Message.Data.Run)
		require.Equal(t, "acme/support", r.Message.Data.Account)
		require.Equal(t, "https://agents.example.com/v1/runs/wf-acme", r.Message.Data.Links.API)
		require.Equal(t, "https://agents.example.com/runs/wf-acme", r.Message.Data.Links.Page)
	}
	approval := got[0].Message
	require.Equal(t, webhooks.ApprovalWaiting, approval.Type)
	require.Equal(t, "amount > 500", approval.Data.Reason)
	require.NotNil(t, approval.Data.Approval)
	require.Equal(t, "pay_out", approval.Data.Approval.Tool)
	require.Equal(t, "step-1/call-0", approval.Data.Approval.Call)
	require.JSONEq(t, `{"amount": 900, "customer": {"email": "[redacted]"}}`, string(approval.Data.Approval.Arguments))
	require.NotContains(t, string(got[0].Body), "ann@example.com")
	require.Equal(t, webhooks.SpendCapReached, got[1].Message.Type, "the more specific of spend.cap_reached and run.escalated")
	require.Contains(t, got[1].Message.Data.Reason, "spend cap of account acme")
	require.Equal(t, webhooks.EscalationReminder, got[2].Message.Type)
	require.Equal(t, "tool pay_out is down", got[2].Message.Data.Reason)
	require.Equal(t, webhooks.EscalationTimedOut, got[3].Message.Type)
	require.Contains(t, got[3].Message.Data.Reason, "within 30m (on_timeout: abort)")
	require.Equal(t, webhooks.RunFinished, got[4].Message.Type)
	require.Equal(t, "completed", got[4].Message.Data.Status)

	sl := slack.delivered()
	require.Len(t, sl, 1)
	var msg map[string]string
	require.NoError(t, json.Unmarshal(sl[0].Body, &msg))
	require.Len(t, msg, 1)
	text := msg["text"]
	for _, want := range []string{"waits for approval", "`wf-acme`", "`pay_out`", "<https://agents.example.com/runs/wf-acme|Open the run>"} {
		require.Contains(t, text, want)
	}
	require.Contains(t, text, "ann@example.com", "the Slack endpoint has no redaction paths")
	require.False(t, strings.Contains(text, "<script"), text)
}
