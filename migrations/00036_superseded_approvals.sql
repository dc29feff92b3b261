-- +goose Up

-- An approval request a fork closed (issue 45). A run waiting for an
-- approval is forked as it is: the fork asks again for the call at its
-- step, under its own key, and the source's claims are fenced, so the
-- source's request can never free a call. The fork's move (ledgerdb.ForkRun)
-- closes every request of the source's tree still awaiting a decision as
-- 'superseded', decided by the fork (decided_by is the fork's workflow ID,
-- reason says so), in the move's transaction: no listing of what waits for a
-- human shows it, and a decision sent to it afterwards is told which run
-- asks in its place. (00034 stays unused: a reverted change had it; main's
-- 00035 came next.)
ALTER TABLE approvals DROP CONSTRAINT approvals_status_check,
    ADD CONSTRAINT approvals_status_check CHECK (status IN ('awaiting-approval', 'approved', 'denied', 'timed-out', 'superseded'));

-- +goose Down
-- A superseded call was never sent: as a denial, its reason naming the fork.
UPDATE approvals SET status = 'denied' WHERE status = 'superseded';
ALTER TABLE approvals DROP CONSTRAINT approvals_status_check,
    ADD CONSTRAINT approvals_status_check CHECK (status IN ('awaiting-approval', 'approved', 'denied', 'timed-out'));
