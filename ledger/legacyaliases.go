package ledger

// Aliases kept only for files other engineers are editing now (workflows/*_test.go,
// bench/ledgerbench.go). New code names agentsagatype.X; delete this file once those name it too.

import "github.com/agentsaga/agentsaga/agentsagatype"

const ActionCompleted = agentsagatype.ActionCompleted
const ActionFailed = agentsagatype.ActionFailed
const ActionRejected = agentsagatype.ActionRejected
const CompensationDone = agentsagatype.CompensationDone

type CompensationRequest = agentsagatype.CompensationRequest

const CompensationSkipped = agentsagatype.CompensationSkipped

type Run = agentsagatype.Run

const RunCompensated = agentsagatype.RunCompensated
const RunCompleted = agentsagatype.RunCompleted
const RunEscalated = agentsagatype.RunEscalated
const RunFailed = agentsagatype.RunFailed
const RunNeedsAttention = agentsagatype.RunNeedsAttention
const RunPartial = agentsagatype.RunPartial
const RunRunning = agentsagatype.RunRunning
