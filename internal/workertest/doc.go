// Package workertest starts a real Temporal dev server for the module's
// integration tests, from the bin/temporal binary that `make bin/temporal`
// builds (it never downloads anything), and reads what a run left in
// Temporal: its histories, the builds that ran its workflow tasks, the
// versions it recorded, its give-ups. No team calls it; a team's tests use
// agentsagatest, whose Main wraps this package's.
package workertest
