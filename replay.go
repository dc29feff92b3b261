package agentsaga

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/replayreport"
	"github.com/agentsaga/agentsaga/ledger"
)

// ReplayOptions are what a replay changes of the run it replays.
type ReplayOptions struct {
	// Model, when set, answers the replay's turns instead of the
	// recording's model ("provider:name" on the command line).
	Model *ModelSpec
	// Spec, when set, is the candidate spec: its model, tools, budget and
	// instructions replace the recording's; the goal stays the recording's.
	Spec *RunSpec
	// System, when set, replaces the system prompt.
	System string
	// Match is how calls find their recording: agentsagatype.MatchInOrder
	// (the default) or MatchAnyOrder.
	Match string
	// Live names the tools the replay calls for real (read-only ones);
	// every other tool is answered from the recording.
	Live []string
}

// ReplaySpec is the spec of a replay of the recorded run source, to be
// started under the workflow ID id: the recording's goal and spec, with
// opts applied, and every tool not named live rewritten into a recorded
// tool (RunSpec.Recorded), so the run it starts can reach nothing but the
// ledger.
func ReplaySpec(ctx context.Context, store *ledger.Store, source, id string, opts ReplayOptions) (RunSpec, error) {
	run, err := ledgerdb.Of(store).GetRun(ctx, source)
	if errors.Is(err, ledgerdb.ErrNotFound) {
		return RunSpec{}, fmt.Errorf("replay: the ledger has no run %s", source)
	}
	if err != nil {
		return RunSpec{}, fmt.Errorf("replay: read %s: %w", source, err)
	}
	if run.ParentWorkflowID != "" {
		return RunSpec{}, fmt.Errorf("replay: %s is a sub-agent of %s; replay its parent, whose replay replays it", source, run.ParentWorkflowID)
	}
	if run.FinishedAt == nil {
		return RunSpec{}, fmt.Errorf("replay: run %s has not ended (status %s): replay a finished recording", source, run.Status)
	}
	var spec RunSpec
	if err := json.Unmarshal(run.Spec, &spec); err != nil {
		return RunSpec{}, fmt.Errorf("replay: the spec recorded for %s does not decode: %w", source, err)
	}
	if spec.IsReplay() {
		return RunSpec{}, fmt.Errorf("replay: %s is itself a replay; replay its source", source)
	}
	spec.Goal = run.Goal
	if opts.Spec != nil {
		candidate := *opts.Spec
		candidate.Goal = run.Goal
		spec = candidate
	}
	if opts.Model != nil {
		spec.Model = *opts.Model
	}
	if opts.System != "" {
		spec.System = opts.System
	}
	spec.Carried = nil
	return spec.Recorded(source, id, opts.Match, opts.Live...)
}

// ParseModel reads "provider:name" (scripted takes no name) as a model.
func ParseModel(s string) (ModelSpec, error) {
	provider, name, _ := strings.Cut(s, ":")
	m := ModelSpec{Provider: provider, Name: name}
	if provider == agentsagatype.ProviderScripted {
		return m, fmt.Errorf("model %q: a scripted model's turns are in a spec; pass --spec FILE", s)
	}
	if err := m.Validate(); err != nil {
		return ModelSpec{}, fmt.Errorf("model %q: %w (want provider:name, for example openai:gpt-4o-mini)", s, err)
	}
	return m, nil
}

// ReplayReport is a replay beside the run it replays: both runs' calls
// side by side, turn by turn (Rows), how many differ (Divergences) and
// from which turn (FirstDivergence), and whether the answer and the status
// are the same. A sub-agent's row holds its own report (ReplayRow.Agent).
// Print writes it as the table `agentsaga replay` prints; as JSON it is
// what GET /v1/runs/{id}/report returns.
type ReplayReport = replayreport.Report

// ReplayRow is one call of a turn of a ReplayReport, the recording's and
// the replay's side by side, and its Kind: ReplaySame, ReplayOutcome,
// ReplayArguments, ReplayNew or ReplayMissing.
type ReplayRow = replayreport.Row

// The kinds of a ReplayRow.
const (
	ReplaySame      = replayreport.Same      // the same tool, arguments and outcome
	ReplayOutcome   = replayreport.Outcome   // the same call, answered otherwise
	ReplayArguments = replayreport.Arguments // the same tool, other arguments
	ReplayNew       = replayreport.New       // the replay made a call the recording did not
	ReplayMissing   = replayreport.Missing   // the recording made a call the replay did not
)

// ErrNotAReplay is what ReportReplay returns for a run that replays no
// recording (no tool of its spec is recorded).
var ErrNotAReplay = errors.New("not a replay: the run has no recorded tools")

// ReportReplay compares the replay id with the recorded run it replays.
// The report of a replay's sub-agent is its top replay's, which holds it
// under the call that started it; a replay that has not ended gets its
// report so far. A run the ledger lacks is ErrRunNotFound, one that
// replays nothing ErrNotAReplay (both wrapped with the ID).
func ReportReplay(ctx context.Context, store *ledger.Store, id string) (ReplayReport, error) {
	db := ledgerdb.Of(store)
	run, err := db.GetRun(ctx, id)
	if err != nil {
		return ReplayReport{}, fmt.Errorf("replay report: read run %s: %w", id, err)
	}
	rec, ok := replayreport.RecordingOf(run.Spec)
	if !ok {
		return ReplayReport{}, fmt.Errorf("replay report: run %s: %w", id, ErrNotAReplay)
	}
	report, err := replayreport.Build(ctx, db, rec.Source, rec.Replay)
	if err != nil {
		return ReplayReport{}, fmt.Errorf("replay report: %s against %s: %w", rec.Replay, rec.Source, err)
	}
	if report.Rows == nil {
		report.Rows = []ReplayRow{} // a replay that has made no call yet: rows is a list
	}
	return report, nil
}
