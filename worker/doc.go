// Package worker is the CLI's worker (`agentsaga worker`, `agentsaga dev`).
// A Go team embedding agentsaga uses the root package instead.
//
// [Run] does all of it until its context ends: it connects to Temporal as
// Temporal's own tools do ([Dial]: temporal.toml
// profiles and the TEMPORAL_* variables, with API keys and mTLS) and to
// Postgres, naming the address when either is unreachable; applies the
// migrations; runs the engine ([New]: an [agentsaga.Engine], with the
// workflows' and activities' bare names too, for runs from older builds),
// as a build of a worker deployment when asked ([Deployment]); serves its
// Prometheus metrics ([MetricsPath]) and its liveness and readiness
// probes ([HealthPath], [ReadyPath]); exports its traces over OTLP when
// OTEL_EXPORTER_OTLP_ENDPOINT is set; prunes the ledger; and, when its
// context ends, drains the calls in flight for up to the stop timeout
// ([Config].StopTimeout, 60 s by default). [Config] holds its settings.
package worker
