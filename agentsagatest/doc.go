// Package agentsagatest is the test kit for a Go team that embeds
// agentsaga.
//
//   - [NewLedger] gives a test a ledger database of its own, migrated, and
//     drops it when the test ends.
//   - [Script] makes a scripted model from turns: [Call] asks for a tool,
//     [Answer] ends the run, [Refuse] refuses. It needs no model server and
//     no API key.
//   - [NewEnvironment] is a Temporal test environment with the engine wired
//     in as a worker wires it (namespaced activities, the retry hook), and a
//     workflow ID unique to the test ([RunID]), so that a second `go test`
//     is never answered from the first one's ledger rows.
//   - [Run] does all of it in one call and returns the run's result.
//   - [Replay] runs a [Recording] (a line of a dataset file that agentsaga
//     dataset add wrote; [Recordings] reads them) again with a candidate
//     spec, every tool answered from the recording, and returns the report
//     and the recording's checks ([Outcome]).
//   - [ImportRecording] writes a recording into a ledger as an ended run,
//     for a test of what reads ended runs (a report, a page).
//   - [WriteReply] answers a fake model server's request with a reply in
//     OpenAI's or Anthropic's wire format, streamed when the request asks;
//     [ReplyStream] gives the stream's events, for a server that paces them.
//   - [Main] runs a test binary against a real Temporal dev server, for
//     tests with a worker of their own.
package agentsagatest
