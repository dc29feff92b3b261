// Package replayreport owns the comparison of a replay with the run it
// replays (agentsaga replay, eval, the live page): the tool calls of both,
// turn by turn, side by side (the same call, a call with other arguments,
// a new call, a missing one, the same call answered otherwise), each
// sub-agent's calls beside its recording's the same way, the first turn
// where they part, the final answers and statuses, and steps, tokens, USD
// and wall clock against the recording's. Compare is pure; Load reads a
// run, its sub-agents with it, as the ledger recorded it, through the few
// reads it needs; Build does both, and RecordingOf finds a replay's source.
package replayreport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/activityid"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/wire"
)

// Call is one tool call a model asked for, and what became of it.
type Call struct {
	Step      int    `json:"step"`
	Tool      string `json:"tool"`
	Arguments string `json:"arguments"`
	// Sent: the call reached its tool's activity (an action under its
	// key); a call the workflow refused (a limit, a denial) was not.
	Sent     bool   `json:"sent"`
	Output   string `json:"output,omitempty"`
	Error    string `json:"error,omitempty"`
	Approval string `json:"approval,omitempty"` // "approved by erin", "denied by erin: why"
	// Attempts and ErrorType are the action's, and Decided the approval
	// as the ledger holds it: what a dataset entry keeps of the call.
	Attempts  int                     `json:"attempts,omitempty"`
	ErrorType string                  `json:"error_type,omitempty"`
	Decided   *agentsagatype.Approval `json:"-"`
	// Agent is a sub-agent call's run, when it started one: its calls are
	// the sub-agent's, and the call's output or error is what the parent's
	// model read of it.
	Agent *Run `json:"agent,omitempty"`
}

// Run is a run as the ledger recorded it.
type Run struct {
	ID     string        `json:"id"`
	Goal   string        `json:"goal"`
	Status string        `json:"status"`
	Reason string        `json:"reason,omitempty"`
	Answer string        `json:"answer,omitempty"`
	Steps  int           `json:"steps"`
	Tokens int64         `json:"tokens"`
	USD    float64       `json:"usd"`
	Wall   time.Duration `json:"wall_ns"`
	Calls  []Call        `json:"calls"`
	// Spec is the spec the run was recorded with, for a dataset entry;
	// the report leaves it out.
	Spec json.RawMessage `json:"-"`
}

// Row kinds.
const (
	Same      = "same"      // the same tool, arguments and outcome
	Outcome   = "outcome"   // the same call, answered otherwise
	Arguments = "arguments" // the same tool, other arguments
	New       = "new"       // the candidate made a call the recording did not
	Missing   = "missing"   // the recording made a call the candidate did not
)

// Row is one call of a turn, side by side.
type Row struct {
	Step      int    `json:"step"`
	Kind      string `json:"kind"`
	Recorded  *Call  `json:"recorded,omitempty"`
	Candidate *Call  `json:"candidate,omitempty"`
	// Agent compares the sub-agents a sub-agent call started on both
	// sides; its divergences count in the report's.
	Agent *Report `json:"agent,omitempty"`
}

// Report is a replay against its recording.
type Report struct {
	Recorded  Run   `json:"recorded"`
	Candidate Run   `json:"candidate"`
	Rows      []Row `json:"rows"`
	// Divergences counts the rows that are not Same, the sub-agents'
	// included; FirstDivergence is the turn of the first (0: none), a
	// sub-agent's counting at the turn that called it.
	Divergences     int  `json:"divergences"`
	FirstDivergence int  `json:"first_divergence,omitempty"`
	SameAnswer      bool `json:"same_answer"`
	SameStatus      bool `json:"same_status"`
}

// Compare sets candidate's calls beside recorded's, turn by turn; within
// a turn, in the order the model asked for them. A sub-agent call on both
// sides compares the two sub-agents under it; a sub-agent asked for at
// another turn than the recording's (a new row and a missing one) is
// compared with the recorded one of the same name in order, as the replay
// matched it, under the new row.
func Compare(recorded, candidate Run) Report {
	r := Report{Recorded: recorded, Candidate: candidate,
		SameAnswer: recorded.Answer == candidate.Answer, SameStatus: recorded.Status == candidate.Status}
	last := 0
	for _, c := range append(append([]Call(nil), recorded.Calls...), candidate.Calls...) {
		last = max(last, c.Step)
	}
	for step := 1; step <= last; step++ {
		a, b := callsOf(recorded.Calls, step), callsOf(candidate.Calls, step)
		for i := range max(len(a), len(b)) {
			row := Row{Step: step}
			switch {
			case i >= len(a):
				row.Kind, row.Candidate = New, &b[i]
			case i >= len(b):
				row.Kind, row.Recorded = Missing, &a[i]
			case a[i].Tool != b[i].Tool:
				r.Rows = append(r.Rows, Row{Step: step, Kind: Missing, Recorded: &a[i]})
				row.Kind, row.Candidate = New, &b[i]
			case wire.CanonicalJSON(a[i].Arguments) != wire.CanonicalJSON(b[i].Arguments):
				row.Kind, row.Recorded, row.Candidate = Arguments, &a[i], &b[i]
			case a[i].Output != b[i].Output || (a[i].Error == "") != (b[i].Error == "") || a[i].Sent != b[i].Sent:
				row.Kind, row.Recorded, row.Candidate = Outcome, &a[i], &b[i]
			default:
				row.Kind, row.Recorded, row.Candidate = Same, &a[i], &b[i]
			}
			if row.Recorded != nil && row.Candidate != nil && row.Recorded.Agent != nil && row.Candidate.Agent != nil {
				sub := Compare(*row.Recorded.Agent, *row.Candidate.Agent)
				row.Agent = &sub
			}
			r.Rows = append(r.Rows, row)
		}
	}
	r.pairMovedAgents()
	for _, row := range r.Rows {
		r.count(row)
	}
	return r
}

// pairMovedAgents compares each sub-agent on a new row with the recorded
// one of the same name on a missing row, the n-th with the n-th.
func (r *Report) pairMovedAgents() {
	missing := map[string][]*Call{}
	for _, row := range r.Rows {
		if row.Kind == Missing && row.Recorded.Agent != nil {
			missing[row.Recorded.Tool] = append(missing[row.Recorded.Tool], row.Recorded)
		}
	}
	for i := range r.Rows {
		row := &r.Rows[i]
		if row.Kind != New || row.Candidate.Agent == nil || len(missing[row.Candidate.Tool]) == 0 {
			continue
		}
		recorded := missing[row.Candidate.Tool][0]
		missing[row.Candidate.Tool] = missing[row.Candidate.Tool][1:]
		sub := Compare(*recorded.Agent, *row.Candidate.Agent)
		row.Agent = &sub
	}
}

// count adds row's divergences, its sub-agent's included, to r's.
func (r *Report) count(row Row) {
	diverged := 0
	if row.Kind != Same {
		diverged++
	}
	if row.Agent != nil {
		diverged += row.Agent.Divergences
	}
	r.Divergences += diverged
	if diverged > 0 && r.FirstDivergence == 0 {
		r.FirstDivergence = row.Step
	}
}

func callsOf(calls []Call, step int) []Call {
	var out []Call
	for _, c := range calls {
		if c.Step == step {
			out = append(out, c)
		}
	}
	return out
}

// Print writes the report as a table, each sub-agent's calls under the
// call that started it.
func (r Report) Print(w io.Writer) {
	fmt.Fprintf(w, "recorded %s  vs  candidate %s\n", r.Recorded.ID, r.Candidate.ID)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "turn\t\trecorded\tcandidate")
	r.printRows(tw, "")
	tw.Flush()
	if r.FirstDivergence == 0 {
		fmt.Fprintln(w, "divergences: 0")
	} else {
		fmt.Fprintf(w, "divergences: %d, first at turn %d\n", r.Divergences, r.FirstDivergence)
	}
	tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\trecorded\tcandidate")
	fmt.Fprintf(tw, "status\t%s\t%s\n", r.Recorded.Status, r.Candidate.Status)
	fmt.Fprintf(tw, "answer\t%s\t%s\n", clip(r.Recorded.Answer, 60), clip(r.Candidate.Answer, 60))
	fmt.Fprintf(tw, "steps\t%d\t%d (%+d)\n", r.Recorded.Steps, r.Candidate.Steps, r.Candidate.Steps-r.Recorded.Steps)
	fmt.Fprintf(tw, "tokens\t%d\t%d (%+d)\n", r.Recorded.Tokens, r.Candidate.Tokens, r.Candidate.Tokens-r.Recorded.Tokens)
	fmt.Fprintf(tw, "usd\t%.4f\t%.4f (%+.4f)\n", r.Recorded.USD, r.Candidate.USD, r.Candidate.USD-r.Recorded.USD)
	fmt.Fprintf(tw, "wall clock\t%s\t%s\n", r.Recorded.Wall.Round(time.Millisecond), r.Candidate.Wall.Round(time.Millisecond))
	tw.Flush()
}

// printRows writes r's rows, a sub-agent's indented under its call with
// their turns prefixed by the calling turn's ("2.1": the sub-agent's turn
// 1, started at turn 2).
func (r Report) printRows(tw io.Writer, prefix string) {
	for _, row := range r.Rows {
		mark := "="
		if row.Kind != Same {
			mark = "!" + row.Kind
		}
		turn := prefix + strconv.Itoa(row.Step)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", turn, mark, describe(row.Recorded), describe(row.Candidate))
		if row.Agent != nil {
			row.Agent.printRows(tw, turn+".")
		}
	}
}

func describe(c *Call) string {
	if c == nil {
		return "-"
	}
	s := c.Tool + " " + clip(wire.CanonicalJSON(c.Arguments), 40)
	switch {
	case !c.Sent:
		s += " (not sent"
		if c.Approval != "" {
			s += ": " + c.Approval
		}
		s += ")"
	case c.Error != "":
		s += " => error: " + clip(c.Error, 40)
	default:
		s += " => " + clip(c.Output, 40)
	}
	return s
}

func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// Ledger is what Load reads; *ledgerdb.Store has it.
type Ledger interface {
	GetRun(ctx context.Context, workflowID string) (agentsagatype.Run, error)
	ListModelTurns(ctx context.Context, workflowID string) ([]agentsagatype.Action, error)
	ListActions(ctx context.Context, workflowID string) ([]agentsagatype.Action, error)
	RunApprovals(ctx context.Context, workflowID string) ([]agentsagatype.Approval, error)
}

// Build compares the replay candidate with the recorded run source, both
// as the ledger holds them.
func Build(ctx context.Context, l Ledger, source, candidate string) (Report, error) {
	recorded, err := Load(ctx, l, source)
	if err != nil {
		return Report{}, err
	}
	replay, err := Load(ctx, l, candidate)
	if err != nil {
		return Report{}, err
	}
	return Compare(recorded, replay), nil
}

// RecordingOf is where a replay's spec has its answers from: the recorded
// run it replays (Source) and the replay's own ID (Replay), which for a
// sub-agent of a replay is its top replay's. ok is false for a spec that
// is not a replay's.
func RecordingOf(spec []byte) (rec agentsagatype.Recording, ok bool) {
	var s struct {
		Tools []agentsagatype.ToolSpec `json:"tools"`
	}
	if json.Unmarshal(spec, &s) != nil {
		return agentsagatype.Recording{}, false
	}
	for _, t := range s.Tools {
		if t.Kind == agentsagatype.ToolKindRecorded && t.Recording != nil {
			return *t.Recording, true
		}
	}
	return agentsagatype.Recording{}, false
}

// Load reads run id from the ledger: its row, and the tool calls its
// model asked for, turn by turn, each with its action (output or error)
// and its approval when it had one, and each sub-agent call with the
// sub-agent's run, read alike.
func Load(ctx context.Context, l Ledger, id string) (Run, error) {
	row, err := l.GetRun(ctx, id)
	if err != nil {
		return Run{}, fmt.Errorf("replay report: read %s: %w", id, err)
	}
	agents := agentTools(row.Spec)
	run := Run{ID: id, Goal: row.Goal, Status: row.Status, Reason: row.Reason, Answer: row.Answer, Steps: row.StepsUsed,
		Tokens: row.TokensUsed, USD: row.USDSpent, Spec: row.Spec}
	if row.FinishedAt != nil {
		run.Wall = row.FinishedAt.Sub(row.StartedAt)
	}
	turns, err := l.ListModelTurns(ctx, id)
	if err != nil {
		return Run{}, fmt.Errorf("replay report: read %s: %w", id, err)
	}
	actions, err := l.ListActions(ctx, id)
	if err != nil {
		return Run{}, fmt.Errorf("replay report: read %s: %w", id, err)
	}
	approvals, err := l.RunApprovals(ctx, id)
	if err != nil {
		return Run{}, fmt.Errorf("replay report: read %s: %w", id, err)
	}
	byKey := map[string]agentsagatype.Action{}
	for _, a := range actions {
		byKey[a.Key] = a
	}
	approvalOf := map[string]agentsagatype.Approval{}
	for _, a := range approvals {
		approvalOf[a.Key] = a
	}
	replies := Replies(turns)
	last := 0
	for step := range replies {
		last = max(last, step)
	}
	for step := 1; step <= last; step++ {
		for i, tc := range replies[step].ToolCalls {
			key := activityid.Key(id, activityid.Tool(step, i+1, tc.Name))
			call := Call{Step: step, Tool: tc.Name, Arguments: tc.Arguments}
			if a, ok := byKey[key]; ok {
				call.Sent, call.Output, call.Error, call.Attempts, call.ErrorType = true, a.Result, a.Error, a.Attempts, a.ErrorType
			}
			if agents[tc.Name] {
				if err := loadAgent(ctx, l, key, &call); err != nil {
					return Run{}, err
				}
			}
			if a, ok := approvalOf[key]; ok && a.Status != "" {
				call.Decided = &a
				call.Approval = a.Status
				if a.DecidedBy != "" {
					call.Approval += " by " + a.DecidedBy
				}
				if a.Reason != "" {
					call.Approval += ": " + a.Reason
				}
			}
			run.Calls = append(run.Calls, call)
		}
	}
	return run, nil
}

// loadAgent reads the sub-agent a call started, under the call's key,
// into call: what the parent's model read of it is the call's outcome. A
// call refused before its sub-agent started has none.
func loadAgent(ctx context.Context, l Ledger, key string, call *Call) error {
	agent, err := Load(ctx, l, key)
	if errors.Is(err, ledgerdb.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	call.Sent, call.Agent = true, &agent
	if agent.Status == agentsagatype.RunFailed {
		call.Error = "sub-agent failed: " + agent.Reason
	} else {
		call.Output = fmt.Sprintf("sub-agent %s: %s", agent.Status, agent.Answer)
	}
	return nil
}

// agentTools are the names of a spec's sub-agent tools.
func agentTools(spec []byte) map[string]bool {
	var s struct {
		Tools []agentsagatype.ToolSpec `json:"tools"`
	}
	_ = json.Unmarshal(spec, &s)
	names := map[string]bool{}
	for _, t := range s.Tools {
		if t.Kind == agentsagatype.ToolKindAgent {
			names[t.Name] = true
		}
	}
	return names
}

// Replies are the model replies that counted in a run's turns, by turn,
// read from its model-turn actions (Ledger.ListModelTurns, in order): the
// last completed one of each turn (a turn may have gone to a fallback
// model, or again after a quota wait). A recorded tool reads them as the
// report does, to find a call's place.
func Replies(turns []agentsagatype.Action) map[int]agentsagatype.ModelTurn {
	replies := map[int]agentsagatype.ModelTurn{}
	for _, t := range turns {
		step, ok := turnStep(t.ActivityID)
		if !ok || t.Status != agentsagatype.ActionCompleted {
			continue
		}
		var turn agentsagatype.ModelTurn
		if json.Unmarshal([]byte(t.Result), &turn) == nil {
			replies[step] = turn
		}
	}
	return replies
}

// turnStep is the turn of a model turn's activity ID (step-003-model,
// step-003-model/fallback, step-003-finish).
func turnStep(id string) (int, bool) {
	var step int
	if _, err := fmt.Sscanf(id, "step-%d-", &step); err != nil {
		return 0, false
	}
	return step, strings.Contains(id, "-model") || strings.Contains(id, "-finish")
}
