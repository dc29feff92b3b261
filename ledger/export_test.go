package ledger

// HoldBatches takes every batch slot of s, so that the claims and
// completions sent meanwhile queue up, and returns the function that frees
// the slots: the queued statements then go out together.
func HoldBatches(s *Store) (release func()) { return s.calls.Hold() }

// QueuedStatements is how many statements wait for a batch.
func QueuedStatements(s *Store) int { return s.calls.Queued() }
