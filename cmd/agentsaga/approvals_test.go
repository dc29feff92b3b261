package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/workflows"
)

// The approval flow from the CLI (issue 24): the call waits and is listed
// across the fleet; bad input names what is wrong; approve sends it once.
func TestApprovalsFromTheCLI(t *testing.T) {
	store := cliWorld(t)
	bank, wires := startBank(t)
	spec := writeFile(t, "spec.yaml", paySupplierSpec(bank, "paid"))
	_, err := runCLI(t, "run", "--spec", spec, "--id", "cli-approval")
	require.NoError(t, err)
	var out string
	require.Eventually(t, func() bool {
		out, err = runCLI(t, "approvals")
		return err == nil && strings.Contains(out, "cli-approval")
	}, 30*time.Second, 100*time.Millisecond, "the irreversible wire waits for approval")
	assert.Contains(t, out, "step-001-call-1-wire")
	assert.Contains(t, out, "tool wire needs approval for every call")
	assert.Zero(t, wires.Load())

	_, err = runCLI(t, "approve", "cli-approval", "step-009-call-1-wire")
	assert.ErrorContains(t, err, `no call "step-009-call-1-wire" waits for approval in this run (waiting: step-001-call-1-wire)`)
	_, err = runCLI(t, "deny", "cli-approval", "step-001-call-1-wire")
	assert.ErrorContains(t, err, "--reason is required")
	_, err = runCLI(t, "approve", "cli-approval")
	assert.Error(t, err, "the call ID is required")

	out, err = runCLI(t, "approve", "cli-approval", "step-001-call-1-wire", "--by", "alice@example.com", "--reason", "invoice 42")
	require.NoError(t, err, out)
	assert.Contains(t, out, "approved by alice@example.com")
	var result workflows.RunResult
	require.NoError(t, devServer.Client().GetWorkflow(context.Background(), "cli-approval", "").Get(context.Background(), &result))
	assert.Equal(t, "paid", result.Answer)
	assert.Equal(t, int32(1), wires.Load(), "the approved wire went out once")

	out, err = runCLI(t, "show", "cli-approval")
	require.NoError(t, err)
	assert.Contains(t, out, "approvals (1):")
	assert.Contains(t, out, "alice@example.com")
	_, err = runCLI(t, "deny", "cli-approval", "step-001-call-1-wire", "--reason", "late")
	assert.Error(t, err, "an ended run takes no decision")
	waiting, err := store.AwaitingApprovals(context.Background(), 10)
	require.NoError(t, err)
	assert.Empty(t, waiting)
}

// Issue 30, item 3, from the CLI: bob denies the wire; once the run has
// moved on (here, to its end), alice's late approve exits non-zero and
// says who denied it, when and why, from the ledger.
func TestALateApproveFromTheCLIIsToldWhoDenied(t *testing.T) {
	store := cliWorld(t)
	bank, wires := startBank(t)
	spec := writeFile(t, "spec.yaml", paySupplierSpec(bank, "not paid"))
	const id, call = "cli-late-approval", "step-001-call-1-wire"
	_, err := runCLI(t, "run", "--spec", spec, "--id", id)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		out, err := runCLI(t, "approvals")
		return err == nil && strings.Contains(out, id)
	}, 30*time.Second, 100*time.Millisecond, "the irreversible wire waits for approval")

	out, err := runCLI(t, "deny", id, call, "--by", "bob@example.com", "--reason", "invoice 42 is a duplicate")
	require.NoError(t, err, out)
	var result workflows.RunResult
	require.NoError(t, devServer.Client().GetWorkflow(context.Background(), id, "").Get(context.Background(), &result), "the run moved on, to its end")
	assert.Equal(t, "not paid", result.Answer)

	_, err = runCLI(t, "approve", id, call, "--by", "alice@example.com")
	require.Error(t, err, "a late approve exits non-zero")
	t.Logf("agentsaga approve printed: agentsaga: %v", err)
	recorded, lerr := store.RunApprovals(context.Background(), id)
	require.NoError(t, lerr)
	require.Len(t, recorded, 1)
	assert.EqualError(t, err, fmt.Sprintf(`approve %s %s: refused: it was already denied by bob@example.com at %s ("invoice 42 is a duplicate"); the first decision stands`,
		id, call, recorded[0].DecidedAt.UTC().Format(time.RFC3339)))
	assert.Zero(t, wires.Load(), "the denied wire never went out")
	assert.Equal(t, "bob@example.com", recorded[0].DecidedBy, "the late approve changed nothing")
}

// startBank is a wire-transfer API on loopback: it counts the wires it
// sends, and is gone with the test.
func startBank(t *testing.T) (url string, wires *atomic.Int32) {
	t.Helper()
	wires = new(atomic.Int32)
	bank := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		wires.Add(1)
		fmt.Fprint(w, `{"sent": true}`)
	}))
	t.Cleanup(bank.Close)
	return bank.URL, wires
}

// paySupplierSpec is a run whose one call, a 1,200 wire to acme through
// bankURL, is irreversible and so waits for a human's approval; answer is
// what the model says after it.
func paySupplierSpec(bankURL, answer string) string {
	return fmt.Sprintf(`
goal: pay the supplier
budget: {steps: 4}
model:
  provider: scripted
  script:
    - tool_calls: [{name: wire, arguments: {to: acme, amount: 1200}}]
    - content: %s
tools:
  - name: wire
    kind: http
    url: %s/wire
    irreversible: true
    parameters: {type: object, properties: {to: {type: string}, amount: {type: number}}}
`, answer, bankURL)
}
