package webhooks

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"

	"github.com/agentsaga/agentsaga/internal/dataset"
	"github.com/agentsaga/agentsaga/internal/textclip"
)

// stored is a delivery's payload as the outbox's trigger writes it: the
// run event, and what it is to this endpoint.
type stored struct {
	Type      string          `json:"type"`
	Timestamp string          `json:"timestamp"`
	Run       string          `json:"run"`
	Account   string          `json:"account"`
	Kind      string          `json:"kind"`
	Seq       int64           `json:"seq"`
	CallKey   string          `json:"call_key"`
	Data      json.RawMessage `json:"data"`
}

// Message is the body of a standard webhook: Standard Webhooks' type,
// timestamp and data.
type Message struct {
	Type      string  `json:"type"`
	Timestamp string  `json:"timestamp"`
	Data      Payload `json:"data"`
}

// Payload is what a webhook says of its run.
type Payload struct {
	Run     string `json:"run"`
	Account string `json:"account"`
	// Reason is why: the escalation's, the approval rule's, the ending's.
	Reason string `json:"reason,omitempty"`
	// Status is the run's (run.finished, run.escalated) or the approval's.
	Status string `json:"status,omitempty"`
	// Event is the run event the webhook tells of: its kind and its place
	// in the run's log (GET /v1/runs/{id}/events?after=seq-1 reads it).
	Event    EventRef  `json:"event"`
	Links    Links     `json:"links"`
	Approval *Approval `json:"approval,omitempty"`
}

// EventRef names a run event.
type EventRef struct {
	Kind string `json:"kind"`
	Seq  int64  `json:"seq"`
}

// Links are the run in the HTTP API and its live page.
type Links struct {
	API  string `json:"api"`
	Page string `json:"page"`
}

// Approval is the call an approval webhook is about, its arguments
// redacted by the endpoint's paths.
type Approval struct {
	Key       string          `json:"key,omitempty"`
	Call      string          `json:"call,omitempty"`
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	Why       string          `json:"why,omitempty"`
}

// eventData are the fields of run events' data a webhook reads.
type eventData struct {
	Status    string `json:"status"`
	Reason    string `json:"reason"`
	Detail    string `json:"detail"`
	Why       string `json:"why"`
	Key       string `json:"key"`
	Call      string `json:"call"`
	Tool      string `json:"tool"`
	Arguments string `json:"arguments"`
}

// render is the body a delivery sends to an endpoint of format, whose
// links start at publicURL ("" gives paths). It is the same on every
// attempt.
func render(raw []byte, format string, redact [][]string, publicURL string) ([]byte, error) {
	var s stored
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("webhooks: payload: %w", err)
	}
	var d eventData
	_ = json.Unmarshal(s.Data, &d) // a kind without these fields says less
	base := strings.TrimRight(publicURL, "/")
	p := Payload{Run: s.Run, Account: s.Account, Reason: textclip.Clip(cmp.Or(d.Reason, d.Detail, d.Why), 4000), Status: d.Status,
		Event: EventRef{Kind: s.Kind, Seq: s.Seq},
		Links: Links{API: base + "/v1/runs/" + url.PathEscape(s.Run), Page: base + "/runs/" + url.PathEscape(s.Run)}}
	if d.Tool != "" {
		a := &Approval{Key: cmp.Or(d.Key, s.CallKey), Call: d.Call, Tool: d.Tool, Why: d.Why}
		if d.Arguments != "" {
			args := dataset.RedactJSON(d.Arguments, redact)
			if json.Valid([]byte(args)) {
				a.Arguments = json.RawMessage(args)
			} else {
				a.Arguments, _ = json.Marshal(args)
			}
		}
		p.Approval = a
	}
	m := Message{Type: s.Type, Timestamp: s.Timestamp, Data: p}
	if format == FormatSlack {
		return json.Marshal(map[string]string{"text": slackText(m)})
	}
	return json.Marshal(m)
}

// slackText is a message a person reads in Slack.
func slackText(m Message) string {
	esc := strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace
	title := map[string]string{
		RunEscalated:       ":rotating_light: A run waits for a person",
		ApprovalWaiting:    ":raised_hand: A call waits for approval",
		ApprovalReminder:   ":alarm_clock: A call still waits for approval",
		ApprovalTimedOut:   ":hourglass: Nobody decided on a call in time",
		EscalationReminder: ":alarm_clock: A run still waits for a person",
		EscalationTimedOut: ":hourglass: Nobody answered a run's escalation in time",
		RunFinished:        ":checkered_flag: A run finished",
		SpendCapReached:    ":money_with_wings: A spend cap stopped a run",
	}[m.Type]
	var b strings.Builder
	fmt.Fprintf(&b, "*%s* (%s)\nRun `%s`", esc(cmp.Or(title, m.Type)), esc(m.Type), esc(m.Data.Run))
	if m.Data.Account != "" {
		fmt.Fprintf(&b, ", account `%s`", esc(m.Data.Account))
	}
	if m.Data.Status != "" {
		fmt.Fprintf(&b, ", %s", esc(m.Data.Status))
	}
	if m.Data.Reason != "" {
		fmt.Fprintf(&b, "\n>%s", esc(strings.ReplaceAll(textclip.Clip(m.Data.Reason, 1500), "\n", "\n>")))
	}
	if a := m.Data.Approval; a != nil {
		fmt.Fprintf(&b, "\nCall `%s` of tool `%s`", esc(a.Call), esc(a.Tool))
		if len(a.Arguments) > 0 {
			fmt.Fprintf(&b, " with ```%s```", esc(textclip.Clip(string(a.Arguments), 1500)))
		}
	}
	if strings.HasPrefix(m.Data.Links.Page, "http") {
		fmt.Fprintf(&b, "\n<%s|Open the run> · <%s|API>", m.Data.Links.Page, m.Data.Links.API)
	} else {
		fmt.Fprintf(&b, "\nLive page: %s", esc(m.Data.Links.Page))
	}
	return b.String()
}
