package activities

// The shared types this room uses, declared once in agentsagatype.

import "github.com/agentsaga/agentsaga/agentsagatype"

type ModelCall = agentsagatype.ModelCall
type ToolCallRequest = agentsagatype.ToolCallRequest
type ToolResult = agentsagatype.ToolResult
type RunFinish = agentsagatype.RunFinish
type GiveUp = agentsagatype.GiveUp
type GaveUp = agentsagatype.GaveUp
type ReadResultRequest = agentsagatype.ReadResultRequest
type RollbackPlanRequest = agentsagatype.RollbackPlanRequest
type Settlement = agentsagatype.Settlement
type RunStatus = agentsagatype.RunStatus
type RetryPlan = agentsagatype.RetryPlan
type CallFailure = agentsagatype.CallFailure
type FindAbandoned = agentsagatype.FindAbandoned
type AbandonedRun = agentsagatype.AbandonedRun
type AbandonedPage = agentsagatype.AbandonedPage
type RollbackRequest = agentsagatype.RollbackRequest
type TerminatedRun = agentsagatype.TerminatedRun
type SubRunsFinish = agentsagatype.SubRunsFinish

const ErrTypeInvalidArguments = agentsagatype.ErrTypeInvalidArguments
const ErrTypeUnknownTool = agentsagatype.ErrTypeUnknownTool
const ErrTypeConflict = agentsagatype.ErrTypeConflict
const ErrTypeInFlight = agentsagatype.ErrTypeInFlight
const ErrTypeRejected = agentsagatype.ErrTypeRejected
const ErrTypeHTTP = agentsagatype.ErrTypeHTTP
const ErrTypeTransient = agentsagatype.ErrTypeTransient
const ErrTypeModelConfig = agentsagatype.ErrTypeModelConfig
const ErrTypeRefusal = agentsagatype.ErrTypeRefusal
const ErrTypePermission = agentsagatype.ErrTypePermission
const ErrTypeNotFound = agentsagatype.ErrTypeNotFound
const ErrTypeFenced = agentsagatype.ErrTypeFenced
const ErrTypeRunNotFound = agentsagatype.ErrTypeRunNotFound
const ErrTypeLedgerUnavailable = agentsagatype.ErrTypeLedgerUnavailable
const ErrTypePayloadTooLarge = agentsagatype.ErrTypePayloadTooLarge
const ErrTypeMCPTools = agentsagatype.ErrTypeMCPTools
const ErrTypeToolConfig = agentsagatype.ErrTypeToolConfig
const ErrTypeCancelled = agentsagatype.ErrTypeCancelled

type Message = agentsagatype.Message
type ToolCall = agentsagatype.ToolCall
type Usage = agentsagatype.Usage
type ModelTurn = agentsagatype.ModelTurn
type ToolDef = agentsagatype.ToolDef

const PreviewBytes = agentsagatype.PreviewBytes

var Preview = agentsagatype.Preview
var Digest = agentsagatype.Digest

type Conversation = agentsagatype.Conversation
type MessageRef = agentsagatype.MessageRef

const ReadResultTool = agentsagatype.ReadResultTool

var ReadResultDef = agentsagatype.ReadResultDef

const NamePrefix = agentsagatype.NamePrefix
const RollbackRunWorkflow = agentsagatype.RollbackRunWorkflow
const AgentRunWorkflow = agentsagatype.AgentRunWorkflow
const ProviderScripted = agentsagatype.ProviderScripted
const ProviderOpenAI = agentsagatype.ProviderOpenAI

type ModelSpec = agentsagatype.ModelSpec

const ProviderAnthropic = agentsagatype.ProviderAnthropic

type ScriptedTurn = agentsagatype.ScriptedTurn
type ScriptedCall = agentsagatype.ScriptedCall

const DefaultContextTokens = agentsagatype.DefaultContextTokens
const ToolKindGo = agentsagatype.ToolKindGo
const ToolKindHTTP = agentsagatype.ToolKindHTTP
const ToolKindAgent = agentsagatype.ToolKindAgent
const ToolKindMCP = agentsagatype.ToolKindMCP

type ToolSpec = agentsagatype.ToolSpec
type CompensationSpec = agentsagatype.CompensationSpec
