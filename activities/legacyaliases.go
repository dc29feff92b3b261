package activities

// Aliases kept only for files other engineers are editing now (workflows/*_test.go,
// bench/ledgerbench.go). New code names agentsagatype.X; delete this file once those name it too.

import "github.com/agentsaga/agentsaga/agentsagatype"

type AbandonedPage = agentsagatype.AbandonedPage
type AbandonedRun = agentsagatype.AbandonedRun
type CallFailure = agentsagatype.CallFailure

const ErrTypeRunNotFound = agentsagatype.ErrTypeRunNotFound

type FindAbandoned = agentsagatype.FindAbandoned
type ModelSpec = agentsagatype.ModelSpec
type ModelTurn = agentsagatype.ModelTurn

const NamePrefix = agentsagatype.NamePrefix
const PreviewBytes = agentsagatype.PreviewBytes
const ProviderScripted = agentsagatype.ProviderScripted

type RollbackRequest = agentsagatype.RollbackRequest

const RollbackRunWorkflow = agentsagatype.RollbackRunWorkflow

type RunStatus = agentsagatype.RunStatus
type ScriptedTurn = agentsagatype.ScriptedTurn
type TerminatedRun = agentsagatype.TerminatedRun

const ToolKindGo = agentsagatype.ToolKindGo

type ToolSpec = agentsagatype.ToolSpec
