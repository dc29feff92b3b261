package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/workflows"
)

func modelsCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "models", Short: "Check the models a spec names"}
	var specPath string
	var timeout time.Duration
	check := &cobra.Command{
		Use:   "check --spec FILE",
		Short: "Send one small request, and one with a tool, to the spec's model and each fallback; print what each server does",
		Long: `Sends each model of the spec (the model, then its fallbacks) a small request and
a request that offers one tool, as a run would (with the worker's API key
from the variable the spec names, and no retries), and prints whether the
server streams, reports usage, calls tools, caches and thinks, with one line
per problem. It costs a few hundred tokens a model.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			spec, err := workflows.ReadSpec(specPath)
			if err != nil {
				return err
			}
			models, err := activities.NewModels(nil)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			problems := 0
			for _, m := range append([]agentsagatype.ModelSpec{spec.Model}, spec.Model.Fallbacks...) {
				ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
				report := checkModel(ctx, models, m, os.Getenv)
				cancel()
				report.print(out)
				problems += len(report.problems)
			}
			if problems > 0 {
				return fmt.Errorf("models check: %d problem(s)", problems)
			}
			return nil
		},
	}
	check.Flags().StringVar(&specPath, "spec", "", "the run spec whose models to check")
	check.Flags().DurationVar(&timeout, "timeout", time.Minute, "how long each model may take for its checks")
	_ = check.MarkFlagRequired("spec")
	cmd.AddCommand(check)
	return cmd
}

// modelReport is what one model's checks found.
type modelReport struct {
	target   string
	facts    []string
	problems []string
}

func (r *modelReport) fact(format string, args ...any) {
	r.facts = append(r.facts, fmt.Sprintf(format, args...))
}
func (r *modelReport) problem(format string, args ...any) {
	r.problems = append(r.problems, fmt.Sprintf(format, args...))
}

func (r modelReport) print(w io.Writer) {
	fmt.Fprintf(w, "%s\n", r.target)
	for _, f := range r.facts {
		fmt.Fprintf(w, "  ok       %s\n", f)
	}
	for _, p := range r.problems {
		fmt.Fprintf(w, "  PROBLEM  %s\n", p)
	}
}

// answerTypes records the Content-Type of each answer the model's client
// got: a text/event-stream is a stream, anything else a whole reply.
type answerTypes struct {
	mu    sync.Mutex
	types []string
	next  http.RoundTripper
}

func (a *answerTypes) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := a.next.RoundTrip(req)
	if err == nil {
		media, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
		a.mu.Lock()
		a.types = append(a.types, media)
		a.mu.Unlock()
	}
	return resp, err
}

func (a *answerTypes) last() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.types) == 0 {
		return ""
	}
	return a.types[len(a.types)-1]
}

// checkPrompt is long enough (over 1,024 tokens) for a provider to cache,
// so that the same request sent twice shows whether it does.
var checkPrompt = "You are a terse assistant checking that a server works. " +
	strings.Repeat("Answer every question in as few words as you can, and never apologise. ", 120)

// checkModel sends m its checks: a small request, the same again (a cache
// read, where the provider caches), and one that offers a tool.
func checkModel(ctx context.Context, models *activities.Models, m agentsagatype.ModelSpec, getenv func(string) string) modelReport {
	report := modelReport{target: m.Target()}
	if err := m.Validate(); err != nil {
		report.problem("the spec: %v", err)
		return report
	}
	var key string
	if m.APIKeyEnv != "" {
		if key = getenv(m.APIKeyEnv); key == "" {
			report.problem("%s is not set here: the worker must have it", m.APIKeyEnv)
			return report
		}
	}
	types := &answerTypes{next: http.DefaultTransport}
	model, err := models.Build(m, key, &http.Client{Transport: types})
	if err != nil {
		report.problem("cannot build the model: %v", err)
		return report
	}
	ask := func(req activities.ModelRequest) (agentsagatype.ModelTurn, int, time.Duration, error) {
		chunks := 0
		req.OnText = func(string) { chunks++ }
		start := time.Now()
		turn, err := model.Turn(ctx, req)
		return turn, chunks, time.Since(start), err
	}
	plain := activities.ModelRequest{Messages: []agentsagatype.Message{
		{Role: "system", Content: checkPrompt},
		{Role: "user", Content: "Say hello in one word."},
	}}
	turn, chunks, took, err := ask(plain)
	if err != nil {
		report.problem("a small request failed: %s", describe(err))
		return report
	}
	report.fact("answers (%s): %q", took.Round(time.Millisecond), clip(turn.Content+turn.Refusal, 60))
	switch answer := types.last(); {
	case answer == "text/event-stream" && chunks > 1:
		report.fact("streams (%d text chunks)", chunks)
	case answer == "text/event-stream":
		report.fact("streams (the reply came in %d chunk)", chunks)
	default:
		report.problem("does not stream: it answered a streamed request whole (%s); runs work, but watchers see the text only at the end", answer)
	}
	if turn.Usage.InputTokens > 0 && turn.Usage.OutputTokens > 0 {
		report.fact("reports usage (%d input, %d output tokens)", turn.Usage.InputTokens, turn.Usage.OutputTokens)
	} else {
		report.problem("reports no usage (%d input, %d output tokens): its turns are charged nothing and its token budgets do not bind", turn.Usage.InputTokens, turn.Usage.OutputTokens)
	}
	if turn.Model != "" && turn.Model != m.Name {
		report.fact("answered as model %q", turn.Model)
	}
	if m.Cache == nil || *m.Cache { // caching is on unless the spec turns it off
		again, _, _, err := ask(plain)
		switch {
		case err != nil:
			report.problem("the same request again failed: %s", describe(err))
		case again.Usage.CachedInputTokens > 0:
			report.fact("caches (%d of %d input tokens read from the cache the second time)", again.Usage.CachedInputTokens, again.Usage.InputTokens)
		default:
			report.fact("reported no cache read for the same %d-token prompt sent twice (caching may be off, or the prefix too short for this model)", again.Usage.InputTokens)
		}
	}
	tooled := activities.ModelRequest{
		Messages: []agentsagatype.Message{{Role: "user", Content: "What time is it in UTC? Use the tool."}},
		Tools: []agentsagatype.ToolDef{{Name: "utc_time", Description: "The current time in UTC.",
			Parameters: json.RawMessage(`{"type":"object","properties":{}}`)}},
	}
	turn, _, _, err = ask(tooled)
	switch {
	case err != nil:
		report.problem("a request with a tool failed: %s", describe(err))
	case len(turn.ToolCalls) == 0:
		report.problem("did not call the tool it was offered (it answered %q): tool-using runs will not work", clip(turn.Content, 60))
	case !json.Valid([]byte(turn.ToolCalls[0].Arguments)):
		report.problem("called %s with arguments that are not JSON: %q", turn.ToolCalls[0].Name, clip(turn.ToolCalls[0].Arguments, 60))
	default:
		report.fact("calls tools (%s %s)", turn.ToolCalls[0].Name, turn.ToolCalls[0].Arguments)
	}
	thinking := m.Thinking != nil || m.Reasoning != nil
	switch {
	case err != nil:
	case turn.Reasoning != nil:
		report.fact("thinks, and asks for its reasoning back (%s, %d bytes kept in the ledger)", turn.Reasoning.Provider, len(turn.Reasoning.Data))
	case thinking:
		report.problem("the spec turns thinking on, but the reply kept no reasoning to send back")
	}
	return report
}

// describe is an error as the run would see it, with what the retry
// classifier makes of it.
func describe(err error) string {
	errType, retryable := activities.ErrorType(err)
	var what string
	switch {
	case errType == agentsagatype.ErrTypeProtocol:
		what = "it speaks another protocol; check provider and base_url"
	case retryable:
		what = "retryable: a run would retry it"
	default:
		what = "not retryable: a run would stop on it"
	}
	var httpErr *activities.HTTPError
	if errors.As(err, &httpErr) && (httpErr.StatusCode == http.StatusUnauthorized || httpErr.StatusCode == http.StatusForbidden) {
		what = "the key is refused; check api_key_env"
	}
	return fmt.Sprintf("%v (%s)", err, what)
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
