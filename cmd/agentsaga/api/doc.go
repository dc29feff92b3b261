// Package api owns agentsaga's HTTP API (issue 33), which `agentsaga serve`
// serves: it starts, lists and reads runs, streams a run's event log as
// Server-Sent Events, sets a replay beside the run it replays (issue 34,
// agentsaga.ReportReplay), carries the human decisions (resume, abort,
// retry, skip, approve, deny), serves its OpenAPI 3.1 document and a run's
// live page (a replay's with its report), and decides who may do what:
// bearer keys (cmd/agentsaga/apikeys) with scopes, each key seeing only its
// account's runs, failed authentications rate-limited per client address.
// Every error is problem+json (RFC 9457).
//
// It keeps no state of its own: runs, keys, idempotency keys and event
// logs are in Postgres and runs are in Temporal, so any number of API
// processes may serve behind a load balancer. Each process needs one
// runevents.Hub (Config.Hub), which its caller runs.
//
// It lives in the CLI's module so that the library's go.mod carries no
// HTTP dependency.
package api
