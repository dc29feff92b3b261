package wire

// AdmitRequest asks the ledger to admit a run whole, or queue it
// (ActivityAdmitRun). Asked again, it reads where the run stands.
type AdmitRequest struct {
	RunID   string `json:"run_id"`
	Account string `json:"account"`
	// SpecKey identifies the run's spec without its goal: runs of one spec
	// learn one cost estimate.
	SpecKey string `json:"spec_key"`
	// QuotaKey is the run's model (provider:name), and QuotaMax the
	// model's max_concurrent_runs (0: none).
	QuotaKey string `json:"quota_key,omitempty"`
	QuotaMax int    `json:"quota_max,omitempty"`
	// Priority is 1 (first) to 5.
	Priority int `json:"priority"`
	// BudgetUSD is the run's budget.usd (0: none), the estimate's bound.
	BudgetUSD float64 `json:"budget_usd,omitempty"`
	// LeaseMS bounds how long the run's reservation lives (its wall clock
	// and a margin; 0: until the run ends).
	LeaseMS int64 `json:"lease_ms,omitempty"`
	// Waited is set when the run asks again after waiting in the queue.
	Waited bool `json:"waited,omitempty"`
}

// Admission is where a run stands in its account's admission queue.
type Admission struct {
	// Status is "admitted" or "queued" ("cancelled" once an operator
	// took it out of the queue).
	Status string `json:"status"`
	// Place is the run's place in its root account's queue, from 1.
	Place int `json:"place,omitempty"`
	// Reason says why a queued run waits.
	Reason string `json:"reason,omitempty"`
	// EstimateUSD is what the run is expected to cost, and what admitting
	// it reserves.
	EstimateUSD float64 `json:"estimate_usd"`
}

// SignalAdmitted wakes a queued run: a pass may have admitted it, or an
// operator taken it out of the queue (`agentsaga queue cancel`).
const SignalAdmitted = "agentsaga-admitted"

// SignalStopForFork asks a running run to stop at its next step boundary,
// once every call of its turn has settled, and wait for a human as an
// escalated run does: the root package's Run.Fork sends it to a running source, so
// that the ledger can move its effects while nothing is in flight. A
// human may resume the run instead of forking it.
//
// It needs no version gate: a run takes the new path only when the signal
// is in its history, which no run recorded before it has; reading the
// channel emits no command.
const SignalStopForFork = "agentsaga-stop-for-fork"

// Admission statuses.
const (
	AdmissionQueued    = "queued"
	AdmissionAdmitted  = "admitted"
	AdmissionCancelled = "cancelled"
	AdmissionEnded     = "ended"
)
