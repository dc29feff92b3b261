package ledgerdb

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentsaga/agentsaga/internal/coalesce"
	"github.com/agentsaga/agentsaga/internal/quota"
	"github.com/jackc/pgx/v5"
)

// ClaimCall is ClaimAction for an attempt that is about to leave the
// process: the same statement that claims the key records leaf, the
// attempt's leaf call (in flight until SettleAttempt ends it), and returns
// its ID in Claim.LeafCallID. A zero leaf (no Kind) records none. Nothing is
// recorded unless the claim executes.
func (s *Store) ClaimCall(ctx context.Context, req ActionRequest, leaf LeafCall, lease time.Duration) (Claim, error) {
	var compTool, compArgs string
	if req.Compensation != nil {
		compTool, compArgs = req.Compensation.Tool, req.Compensation.ArgumentsTemplate
	}
	got, err := coalesce.Row(ctx, s.calls, req.Key, `
		SELECT c.claim, coalesce(c.run_fence, ''), coalesce(c.leaf_call_id, 0), `+actionColumns+`
		FROM agentsaga_claim_call($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) c,
		     LATERAL (SELECT (c.action).*) a`,
		[]any{req.Key, req.WorkflowID, req.ActivityID, req.Tool, req.Arguments, req.Fingerprint(), lease.Milliseconds(),
			compTool, compArgs, req.Compensates, req.Kind, leaf.Attempt, leaf.Kind, leaf.Target},
		func(row pgx.Row) (c claimRow, err error) {
			err = row.Scan(append([]any{&c.outcome, &c.runFence, &c.claim.LeafCallID}, actionFields(&c.claim.Action)...)...)
			return c, err
		})
	return s.claimed(ctx, req, got, err)
}

// claimRow is what a claim statement said.
type claimRow struct {
	claim             Claim
	outcome, runFence string
	// spend is the cap that refused the turn (outcome claimSpend).
	spend SpendReservation
}

// TurnRead is what a model turn's claim (ClaimTurn) writes and reads
// besides the key: the messages the workflow appends to the run's
// conversation, then, once the turn is claimed, the conversation before
// Through, fitted to Fit.
type TurnRead struct {
	// WorkflowID is the conversation's run.
	WorkflowID string
	// Append are messages no activity wrote yet (the system prompt, the
	// goal, a human's instruction, a failed call's error), written first;
	// a seq already written keeps its first content.
	Append  []Message
	Through int
	Fit     FitRequest
	// Quota, when set, admits the turn on its quota before the claim
	// (ErrQuotaWait when it has no room).
	Quota *QuotaClaim
	// Spend, when set, reserves the turn's most expensive outcome on its
	// account's spend caps in the claim (a *SpendCapError when they cannot
	// pay for it; nothing is claimed then).
	Spend *SpendClaim
}

// FitRequest says how a model request fits its conversation to a context
// budget; agentsaga_fit_plan (migration 00011) says how the plan is made.
type FitRequest struct {
	// Budget is the tokens the conversation and Trailing may take; 0 or
	// less means no budget.
	Budget int
	// Trailing is the tokens of what follows the conversation: the budget
	// note, instructions, the tool definitions.
	Trailing int
	// KeptTurns is how many of the last turns keep their outputs whole
	// while older outputs can make room.
	KeptTurns int
	// CutBytes is how much of a shortened output is read (a tool output no
	// longer than it is never shortened), and CutTokens what one costs.
	CutBytes, CutTokens int
	// NoteTokens is room for the note that says what was left out.
	NoteTokens int
}

// FitPlan is what a request leaves out: every unpinned tool output before
// CutBefore that is longer than FitRequest.CutBytes is sent as a preview,
// and every unpinned message before OmitBefore not at all (Omitted turns).
type FitPlan struct {
	CutBefore  int `json:"cut_before"`
	OmitBefore int `json:"omit_before"`
	Omitted    int `json:"omitted"`
}

// ClaimTurn claims a model turn's key in one statement: it writes
// turn.Append into the conversation, claims req (a model turn: Kind
// ActionModel) as ClaimCall does with leaf as its leaf call and, once
// claimed, reads the conversation the request sends into
// Claim.Conversation, with the plan that chose it in Claim.Plan. A turn
// reads only what it sends, so it costs the same however long the run.
func (s *Store) ClaimTurn(ctx context.Context, req ActionRequest, leaf LeafCall, lease time.Duration, turn TurnRead) (Claim, error) {
	n := len(turn.Append)
	seqs, tokens := make([]int32, n), make([]int32, n)
	roles, contents, toolCalls, toolCallIDs, names, keys := make([]string, n), make([]string, n), make([]*string, n),
		make([]string, n), make([]string, n), make([]string, n)
	pinned := make([]bool, n)
	for i, m := range turn.Append {
		seqs[i], roles[i], contents[i], toolCallIDs[i], names[i], keys[i], pinned[i], tokens[i] =
			int32(m.Seq), m.Role, storable(m.Content), m.ToolCallID, m.Name, m.SourceKey, m.Pinned, int32(m.Tokens)
		if len(m.ToolCalls) > 0 {
			calls := string(m.ToolCalls)
			toolCalls[i] = &calls
		}
	}
	fit := turn.Fit
	args := []any{req.Key, req.WorkflowID, req.ActivityID, req.Tool, req.Arguments, req.Fingerprint(), lease.Milliseconds(),
		leaf.Attempt, leaf.Target,
		turn.WorkflowID, seqs, roles, contents, toolCalls, toolCallIDs, names, pinned, keys, tokens,
		turn.Through, fit.Trailing, fit.Budget, fit.CutBytes, fit.CutTokens, fit.NoteTokens, fit.KeptTurns}
	scan := func(row pgx.Row) (c claimRow, err error) {
		var w struct {
			seqs, tokens, bytes                                  []int32
			roles, contents, toolCalls, toolCallIDs, names, keys []string
			pinned                                               []bool
		}
		dest := append(append([]any{&c.outcome, &c.runFence, &c.claim.LeafCallID}, actionFields(&c.claim.Action)...),
			&c.claim.Plan.CutBefore, &c.claim.Plan.OmitBefore, &c.claim.Plan.Omitted, &w.seqs, &w.roles, &w.contents,
			&w.toolCalls, &w.toolCallIDs, &w.names, &w.pinned, &w.keys, &w.tokens, &w.bytes)
		var retryAt *time.Time
		if turn.Quota != nil || turn.Spend != nil {
			if turn.Quota != nil {
				c.claim.Quota.Key, c.claim.Quota.Reserved.Output = turn.Quota.Key, turn.Quota.Output
			}
			dest = append(dest, &c.claim.Quota.Admitted, &c.claim.Quota.Reserved.Input, &retryAt, &c.claim.Quota.Reason)
		}
		var refusal spendRefusal
		if turn.Spend != nil {
			dest = append(dest, &c.claim.SpendUSD, &refusal.account, &refusal.period, &refusal.cap, &refusal.spent,
				&refusal.reserved, &refusal.resets, &refusal.onExhausted, &refusal.room)
		}
		if err := row.Scan(dest...); err != nil {
			return c, err
		}
		if retryAt != nil {
			c.claim.Quota.RetryAt = *retryAt
		}
		if c.outcome == claimSpend {
			c.spend = refusal.reservation()
			return c, nil
		}
		if refusal.cap != nil {
			c.claim.SpendCap = refusal.reservation()
			c.claim.SpendCap.Admitted = true
		}
		if c.outcome != claimExecuted {
			return c, nil
		}
		c.claim.Conversation = make([]Message, len(w.seqs))
		for i := range w.seqs {
			m := Message{Seq: int(w.seqs[i]), Role: w.roles[i], Content: w.contents[i], ToolCallID: w.toolCallIDs[i],
				Name: w.names[i], Pinned: w.pinned[i], SourceKey: w.keys[i], Tokens: int(w.tokens[i]), Bytes: int(w.bytes[i])}
			if w.toolCalls[i] != "" {
				m.ToolCalls = []byte(w.toolCalls[i])
			}
			c.claim.Conversation[i] = m
		}
		return c, nil
	}
	var got claimRow
	var err error
	if sp := turn.Spend; sp != nil {
		// The quota's arguments ('' for none), then the spend's: the
		// same round trip.
		q := cmp.Or(turn.Quota, &QuotaClaim{})
		got, err = coalesce.Row(ctx, s.calls, req.Key, claimSpendTurnSQL,
			append(args, q.Key, q.Output, milliseconds(cmp.Or(q.Lease, DefaultQuotaLease)),
				sp.Account, sp.InputUSDPerMillion, sp.OutputUSDPerMillion, sp.OutputTokens, sp.Finishing), scan)
	} else if q := turn.Quota; q != nil {
		// Admitted by the claim itself (migration 00016): three arguments
		// and four columns more, the same round trip.
		got, err = coalesce.Row(ctx, s.calls, req.Key, claimQuotaTurnSQL,
			append(args, q.Key, q.Output, milliseconds(cmp.Or(q.Lease, DefaultQuotaLease))), scan)
	} else {
		got, err = coalesce.Row(ctx, s.calls, req.Key, claimTurnSQL, args, scan)
	}
	return s.claimed(ctx, req, got, err)
}

// The statements of a model turn's claim (ClaimTurn): without a quota,
// and on one.
const (
	turnClaimColumns = `
		SELECT c.claim, coalesce(c.run_fence, ''), coalesce(c.leaf_call_id, 0), ` + actionColumns + `,
		       c.cut_before, c.omit_before, c.omitted, c.window_seqs, c.window_roles, c.window_contents,
		       c.window_tool_calls, c.window_tool_call_ids, c.window_names, c.window_pinned, c.window_source_keys,
		       c.window_tokens, c.window_bytes`
	claimTurnSQL = turnClaimColumns + `
		FROM agentsaga_claim_turn($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18,
		                          $19, $20, $21, $22, $23, $24, $25, $26) c,
		     LATERAL (SELECT (c.action).*) a`
	claimQuotaTurnSQL = turnClaimColumns + `, c.quota_admitted, c.quota_input, c.quota_retry_at, coalesce(c.quota_reason, '')
		FROM agentsaga_claim_quota_turn($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18,
		                                $19, $20, $21, $22, $23, $24, $25, $26, $27, $28, $29) c,
		     LATERAL (SELECT (c.action).*) a`
	claimSpendTurnSQL = turnClaimColumns + `, c.quota_admitted, c.quota_input, c.quota_retry_at, coalesce(c.quota_reason, ''),
		       c.spend_usd::float8, c.spend_account, c.spend_period, c.spend_cap::float8, c.spend_spent::float8,
		       c.spend_reserved::float8, c.spend_resets, c.spend_on_exhausted, c.spend_room::float8
		FROM agentsaga_claim_spend_turn($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18,
		                                $19, $20, $21, $22, $23, $24, $25, $26, $27, $28, $29, $30, $31, $32, $33, $34) c,
		     LATERAL (SELECT (c.action).*) a`
)

// What agentsaga_claim_call says of a claim.
const (
	claimExecuted = "claimed"
	claimStored   = "stored"
	claimConflict = "conflict"
	claimFenced   = "fenced"
	claimInFlight = "in-flight"
	claimQuota    = "quota" // agentsaga_claim_quota_turn: refused by the quota
	claimSpend    = "spend" // agentsaga_claim_spend_turn: refused by a spend cap
)

var runFenceText = map[string]string{
	"run-ended":      fenceText[FenceRunEnded],
	"rollback-begun": "the run's rollback has begun",
}

// claimed turns what the claim statement said into a Claim or the error
// that says why the key was not claimed.
func (s *Store) claimed(ctx context.Context, req ActionRequest, got claimRow, err error) (Claim, error) {
	if errors.Is(err, pgx.ErrNoRows) {
		// The run refuses claims and the key was never claimed: say why.
		why, err := s.runFence(ctx, req.WorkflowID, req.Compensates != "")
		switch {
		case err != nil:
			return Claim{}, fmt.Errorf("ledger: claim %s: %w", req.Key, err)
		case why != "":
			return Claim{}, fmt.Errorf("ledger: claim %s: %w (%s)", req.Key, ErrFenced, why)
		}
		return Claim{}, fmt.Errorf("ledger: claim %s: %w", req.Key, ErrInFlight)
	}
	if err != nil {
		return Claim{}, fmt.Errorf("ledger: claim %s: %w", req.Key, err)
	}
	claim, existing, runFence := got.claim, got.claim.Action, got.runFence
	if claim.Quota.Admitted && got.outcome != claimExecuted {
		// Admitted, then not claimed after all (another attempt claimed
		// the key in between, or the run ended): nothing will be sent.
		// Should the refund fail, the quota errs toward admitting less.
		_ = s.SettleQuota(ctx, claim.Quota.Key, claim.Quota.Reserved, quota.Tokens{})
	}
	switch got.outcome {
	case claimExecuted:
		claim.Execute = true
		return claim, nil
	case claimQuota:
		q := claim.Quota
		if q.RetryAt.IsZero() {
			return Claim{}, fmt.Errorf("ledger: claim %s: quota %s: %d input and %d output tokens (%s): %w",
				req.Key, q.Key, q.Reserved.Input, q.Reserved.Output, q.Reason, ErrQuotaTooLarge)
		}
		return Claim{Quota: q}, fmt.Errorf("ledger: claim %s: quota %s has no room (%s) before %s: %w",
			req.Key, q.Key, q.Reason, q.RetryAt.UTC().Format(time.RFC3339Nano), ErrQuotaWait)
	case claimSpend:
		s.countSpendRefusal(ctx, got.spend.Cap)
		return Claim{}, fmt.Errorf("ledger: claim %s: %w", req.Key, &SpendCapError{Reservation: got.spend, USD: claim.SpendUSD})
	case claimStored:
		return Claim{Action: existing}, nil
	case claimConflict:
		return Claim{}, fmt.Errorf("ledger: claim %s (stored %s %s, got %s %s): %w",
			req.Key, existing.Tool, existing.Arguments, req.Tool, req.Arguments, ErrConflict)
	case claimFenced:
		why := fenceText[existing.FenceReason]
		if runFence != "" {
			why = runFenceText[runFence]
		}
		return Claim{}, fmt.Errorf("ledger: claim %s: %w (%s)", req.Key, ErrFenced, why)
	case claimInFlight:
		return Claim{}, fmt.Errorf("ledger: claim %s: %w", req.Key, ErrInFlight)
	}
	return Claim{}, fmt.Errorf("ledger: claim %s: the claim said %q", req.Key, got.outcome)
}

// DropLeafCall removes the leaf call a claim recorded for an attempt that
// then sent nothing (it lost its key before the call), so that the run's
// leaf calls count only attempts that left the process.
func (s *Store) DropLeafCall(ctx context.Context, id int64) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM leaf_calls WHERE id = $1`, id); err != nil {
		return fmt.Errorf("ledger: drop leaf call %d: %w", id, err)
	}
	return nil
}
