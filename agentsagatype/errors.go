package agentsagatype

// ErrTypeProtocol is the application error type of a model server that
// answered 200 with a body that is neither a stream nor a completion. It
// speaks another protocol, so another attempt cannot help and its breaker
// must not count it: the run escalates, naming what came back. The other
// error types the activities return are the engine's own (internal/wire).
const ErrTypeProtocol = "ProtocolMismatch"
