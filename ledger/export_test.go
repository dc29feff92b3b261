package ledger

// HoldBatches takes every batch slot of s, so that the claims and
// completions sent meanwhile queue up, and returns the function that frees
// the slots: the queued statements then go out together.
func HoldBatches(s *Store) (release func()) {
	for range cap(s.calls.slots) {
		s.calls.slots <- struct{}{}
	}
	return func() {
		for range cap(s.calls.slots) {
			<-s.calls.slots
		}
	}
}

// QueuedStatements is how many statements wait for a batch.
func QueuedStatements(s *Store) int {
	s.calls.mu.Lock()
	defer s.calls.mu.Unlock()
	return len(s.calls.queue)
}
