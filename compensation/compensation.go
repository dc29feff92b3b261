// Package compensation owns the saga: pairing each forward action with the
// action that undoes it, registering that pair in the ledger before the
// forward action runs, and walking a failed run's stack backwards on a
// disconnected context. This first form fixes how a compensation is keyed;
// the walk builds on the ledger's actions.compensation_id link.
package compensation

import "strings"

const suffix = "/compensate"

// Key is the idempotency key of the compensation for the forward action
// with key forwardKey. It is derived, not generated, so every attempt of
// every worker names the same compensation.
func Key(forwardKey string) string { return forwardKey + suffix }

// ForwardKey returns the forward action's key for a compensation key, and
// false when key is not a compensation key.
func ForwardKey(key string) (string, bool) {
	return strings.CutSuffix(key, suffix)
}
