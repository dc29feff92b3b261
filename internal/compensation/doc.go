// Package compensation owns the saga: pairing each forward action with the
// action that undoes it, filling the compensation's arguments from what
// the forward call sent and got back, and walking a failed run's stack
// backwards ([Walk]).
//
// The pairing is registered in the ledger in the same statement that
// claims the forward action, before it is attempted, so a call whose
// outcome is never learned is undone too. A compensation has a key of its
// own, the forward key plus "/compensate" (activityid.Compensation).
// [Walk] runs on a disconnected context, so cancellation cannot stop it,
// through a [Runner] the workflow gives it; a compensation that still
// fails is handed to a human, who retries or skips it ([Decision]), and
// the walk's [Report] says what happened to each action. The run never
// ends half-changed without saying so.
package compensation
