package ledger

// The shared types this room uses, declared once in agentsagatype.

import "github.com/agentsaga/agentsaga/agentsagatype"

const RunRunning = agentsagatype.RunRunning
const RunCompleted = agentsagatype.RunCompleted
const RunPartial = agentsagatype.RunPartial
const RunEscalated = agentsagatype.RunEscalated
const RunCompensated = agentsagatype.RunCompensated
const RunNeedsAttention = agentsagatype.RunNeedsAttention
const RunFailed = agentsagatype.RunFailed

type Run = agentsagatype.Run
type RunOutcome = agentsagatype.RunOutcome

const ActionStarted = agentsagatype.ActionStarted
const ActionCompleted = agentsagatype.ActionCompleted
const ActionFailed = agentsagatype.ActionFailed
const ActionRejected = agentsagatype.ActionRejected

type Action = agentsagatype.Action
type CompensationRequest = agentsagatype.CompensationRequest

const CompensationRegistered = agentsagatype.CompensationRegistered
const CompensationDone = agentsagatype.CompensationDone
const CompensationNotNeeded = agentsagatype.CompensationNotNeeded
const CompensationFailed = agentsagatype.CompensationFailed
const CompensationSkipped = agentsagatype.CompensationSkipped

type Compensation = agentsagatype.Compensation
type RollbackPlan = agentsagatype.RollbackPlan

const RunTerminated = agentsagatype.RunTerminated
