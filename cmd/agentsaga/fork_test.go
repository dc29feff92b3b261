package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/workflows"
)

// A run that escalated at step 2 is forked from the CLI at failed, with a
// new script and the operator's message: the fork completes, show links
// the two, a second fork of the source is refused naming the fork, and
// the source can still be aborted.
func TestForkFromTheCLI(t *testing.T) {
	store := cliWorld(t)
	const tools = `
tools:
  - {name: word_count, kind: go}
`
	spec := writeFile(t, "spec.yaml", `
goal: answer the ticket
budget: {steps: 4}
model:
  provider: scripted
  script:
    - tool_calls: [{name: word_count, arguments: {text: "the ticket"}}]
    - refusal: the ticket is unclear
`+tools)
	fixed := writeFile(t, "fixed.yaml", `
goal: ignored, the source's goal stays
budget: {steps: 4}
model:
  provider: scripted
  script:
    - tool_calls: [{name: word_count, arguments: {text: "the ticket"}}]
    - content: answered, with the operator's hint
`+tools)
	_, err := runCLI(t, "run", "--spec", spec, "--id", "cli-fork-src")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		run, err := store.GetRun(context.Background(), "cli-fork-src")
		return err == nil && run.Status == agentsagatype.RunEscalated
	}, 30*time.Second, 100*time.Millisecond, "the refusal escalates the run")

	_, err = runCLI(t, "fork", "cli-fork-src")
	assert.ErrorContains(t, err, "--at is required")
	_, err = runCLI(t, "fork", "cli-fork-src", "--at", "soon")
	assert.ErrorContains(t, err, "give a step number from 1, or failed")
	_, err = runCLI(t, "fork", "cli-fork-src", "--at", "2", "--spec", fixed, "--model", "openai:gpt-4o")
	assert.ErrorContains(t, err, "name one")

	out, err := runCLI(t, "fork", "cli-fork-src", "--at", "failed", "--spec", fixed, "--message", "it asks for a refund")
	require.NoError(t, err, out)
	assert.Contains(t, out, "forked cli-fork-src at step 2 into cli-fork-src-fork")
	var result workflows.RunResult
	require.NoError(t, devServer.Client().GetWorkflow(context.Background(), "cli-fork-src-fork", "").Get(context.Background(), &result))
	assert.Equal(t, agentsagatype.RunCompleted, result.Status, result.Reason)
	assert.Equal(t, "answered, with the operator's hint", result.Answer)

	out, err = runCLI(t, "show", "cli-fork-src")
	require.NoError(t, err)
	assert.Contains(t, out, "forks: cli-fork-src-fork")
	out, err = runCLI(t, "show", "cli-fork-src-fork")
	require.NoError(t, err)
	assert.Contains(t, out, "goal: answer the ticket")
	assert.Contains(t, out, "forked from: cli-fork-src at step 2")

	_, err = runCLI(t, "fork", "cli-fork-src", "--at", "1", "--id", "cli-fork-again")
	assert.ErrorContains(t, err, "already forked into cli-fork-src-fork")
	out, err = runCLI(t, "abort", "cli-fork-src", "--reason", "the fork took over")
	require.NoError(t, err, out)
}
