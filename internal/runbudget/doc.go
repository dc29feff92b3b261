// Package runbudget owns one run's budget as its workflow keeps it: the
// run's budget.Limits and what it has spent ([RunBudget]), the share a
// sub-agent is granted and reserved ([RunBudget.Grant], [Reservation]),
// the graceful-finish threshold ([RunBudget.ShouldFinish],
// [FinishInstruction]) and the note the model reads each turn
// ([RunBudget.Note]). It is pure, and never reads the clock, so workflow
// code replays it. The workflows use it; a team reads a run's budget
// through the Budget query (budget.Remaining).
package runbudget
