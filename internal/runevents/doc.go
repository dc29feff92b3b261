// Package runevents owns a run's event log in Postgres (issue 33): what a
// run did as it happened (a turn started, the model's text as it streams, a
// tool call started and finished, a wait, an approval, the ending), for the
// clients that watch a run live. It is the ledger room's, beside the
// ledger's tables, and kept as long as the run's other rows.
//
// A publish is at least once and a store is once: each event carries a key
// of its own within its run (the call's idempotency key and what the event
// is of it), and a key the log holds already is skipped. A call's start
// and end are appended by the ledger's own claim and settle statements
// (triggers, migration 00027) to an inbox that takes no lock; a publish
// or a read of the run numbers its inbox into the log. Events are numbered
// per run in the order they are numbered, never renumbered, so a reader
// that has read through N asks for what follows N ([Log.Read]) and misses
// nothing. A [Hub] holds one LISTEN connection per process and wakes the
// readers of a run when its log grows; a run's events notify only while a
// hub leases the run for its readers (migration 00039). [Follow] reads a
// run's log from an offset and then waits for more.
package runevents
