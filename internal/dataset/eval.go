package dataset

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/agentsaga/agentsaga/internal/replayreport"
)

// Outcome is one entry's eval: its replay against its recording, and its
// checks against the replay.
type Outcome struct {
	Entry  string              `json:"entry"`  // file:line
	Source string              `json:"source"` // the ID the entry was imported under
	Replay string              `json:"replay"`
	Report replayreport.Report `json:"report"`
	Checks []Result            `json:"checks"`
	Passed bool                `json:"passed"`
}

// Judge reads the replay and its imported source from the ledger, compares
// them and runs e's checks on the replay.
func Judge(ctx context.Context, l replayreport.Ledger, entry string, e Entry, source, replay string) (Outcome, error) {
	report, err := replayreport.Build(ctx, l, source, replay)
	if err != nil {
		return Outcome{}, fmt.Errorf("eval %s: %w", entry, err)
	}
	return judged(entry, e, source, replay, report), nil
}

// JudgeFork is Judge of a what-if (ForkAt): the candidate's calls are the
// prefix's before step at (before, as ForkAt read it: the fork holds
// their actions now, not their turns), which the fork inherited, and the
// fork's own from at on, as the run the checks mean would have made them.
func JudgeFork(ctx context.Context, l replayreport.Ledger, entry string, e Entry, source string, before replayreport.Run, fork string, at int) (Outcome, error) {
	recorded, err := replayreport.Load(ctx, l, source)
	if err != nil {
		return Outcome{}, fmt.Errorf("eval %s: %w", entry, err)
	}
	candidate, err := replayreport.Load(ctx, l, fork)
	if err != nil {
		return Outcome{}, fmt.Errorf("eval %s: %w", entry, err)
	}
	var calls []replayreport.Call
	for _, c := range before.Calls {
		if c.Step < at {
			calls = append(calls, c)
		}
	}
	for _, c := range candidate.Calls {
		if c.Step >= at {
			calls = append(calls, c)
		}
	}
	candidate.Calls = calls
	return judged(entry, e, source, fork, replayreport.Compare(recorded, candidate)), nil
}

func judged(entry string, e Entry, source, replay string, report replayreport.Report) Outcome {
	o := Outcome{Entry: entry, Source: source, Replay: replay, Report: report}
	o.Checks = Evaluate(e, report.Candidate)
	o.Passed = Passed(o.Checks)
	return o
}

// PrintOutcomes writes one line an entry, and a total line.
func PrintOutcomes(w io.Writer, outcomes []Outcome) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "entry\tstatus\tdivergences\tchecks")
	failed := 0
	for _, o := range outcomes {
		status := o.Report.Candidate.Status
		if !o.Report.SameStatus {
			status += " (was " + o.Report.Recorded.Status + ")"
		}
		div := "0"
		if o.Report.Divergences > 0 {
			div = fmt.Sprintf("%d, first at turn %d", o.Report.Divergences, o.Report.FirstDivergence)
		}
		passed := 0
		var failures []string
		for _, r := range o.Checks {
			if r.Passed {
				passed++
			} else {
				failures = append(failures, r.Check+": "+r.Detail)
			}
		}
		checks := fmt.Sprintf("%d/%d passed", passed, len(o.Checks))
		if len(failures) > 0 {
			failed++
			checks = fmt.Sprintf("FAILED %d/%d: %s", len(failures), len(o.Checks), strings.Join(failures, "; "))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", o.Entry, status, div, checks)
	}
	tw.Flush()
	fmt.Fprintf(w, "%d entries, %d failed\n", len(outcomes), failed)
}
