package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/runevents"
	"github.com/agentsaga/agentsaga/worker"
)

// errWatchDone ends a watch once the run's ending is printed.
var errWatchDone = errors.New("the run ended")

// watchCommand follows a run's event log in a terminal (issue 33): what it
// did so far, then what it does, as it does it, until it ends.
func watchCommand() *cobra.Command {
	var after int64
	cmd := &cobra.Command{
		Use:   "watch RUN_ID [--after SEQ]",
		Short: "Follow a run as it happens: its turns, the model's text, its tool calls, its waits and how it ended (from its event log)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if after < 0 {
				return fmt.Errorf("watch: --after %d: a sequence number is 0 (from the start) or more", after)
			}
			store, err := ledgerdb.Open(cmd.Context(), worker.ConfigFromEnv().DatabaseURL)
			if err != nil {
				return err
			}
			defer store.Close()
			log, hub := runevents.New(store.Pool()), runevents.NewHub(store.Pool())
			// The hub's LISTEN connection ends with the watch, not with the
			// process: a watch run inside another (a test) leaves none open.
			ctx, stopHub := context.WithCancel(cmd.Context())
			hubDone := make(chan struct{})
			go func() { defer close(hubDone); hub.Run(ctx, nil) }()
			defer func() { stopHub(); <-hubDone }()
			out := cmd.OutOrStdout()
			err = runevents.Follow(ctx, log, hub, args[0], after, 2*time.Second, func(e runevents.Event) error {
				printEvent(out, e)
				if e.Kind == runevents.RunFinished {
					return errWatchDone
				}
				return nil
			})
			if errors.Is(err, errWatchDone) {
				return nil
			}
			return err
		},
	}
	cmd.Flags().Int64Var(&after, "after", 0, "start after this sequence number (the last one a watch printed)")
	return cmd
}

// printEvent writes one event as a line: its number, its time, its kind
// and what it says.
func printEvent(out io.Writer, e runevents.Event) {
	var data map[string]any
	_ = json.Unmarshal(e.Data, &data)
	field := func(name string) string {
		if v, ok := data[name]; ok && v != nil {
			return fmt.Sprint(v)
		}
		return ""
	}
	var what string
	switch e.Kind {
	case runevents.TextDelta:
		what = fmt.Sprintf("%q", field("text"))
	case runevents.TurnStarted:
		// The call's activity ID names the step: the key's last part.
		what = strings.TrimSpace(e.CallKey[strings.LastIndex(e.CallKey, "/")+1:] + " " + field("model") + " attempt " + field("attempt"))
	case runevents.TurnFinished:
		what = field("model") + " " + field("outcome")
		if text := field("text"); text != "" {
			what += fmt.Sprintf(": %q", text)
		}
		if calls := field("tool_calls"); calls != "" {
			what += " calls " + calls
		}
		if errText := field("error"); errText != "" {
			what += ": " + errText
		}
	case runevents.ToolStarted:
		what = field("tool") + " " + field("arguments")
	case runevents.ToolFinished:
		what = field("tool") + " -> " + field("output")
		if errText := field("error"); errText != "" {
			what = field("tool") + " " + field("outcome") + ": " + errText
		}
	case runevents.RunFinished:
		what = field("status") + ": " + field("reason")
		if answer := field("answer"); answer != "" {
			what += "\n    answer: " + answer
		}
	case runevents.AttemptDiscarded:
		what = "attempt " + field("attempt") + ": " + field("why")
	case runevents.Queued:
		what = "place " + field("place") + " in the admission queue, estimated at $" + field("estimate_usd") + ": " + field("reason")
	case runevents.Admitted:
		what = "estimated at $" + field("estimate_usd") + "; its first turn follows"
	default:
		what = strings.TrimSpace(field("status") + " " + field("detail"))
	}
	fmt.Fprintf(out, "%5d  %s  %-18s %s\n", e.Seq, e.At.UTC().Format("15:04:05"), e.Kind, what)
}
