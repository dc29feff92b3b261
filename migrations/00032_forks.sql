-- +goose Up

-- Forks (issue 45). A run can be forked from a step: the fork starts with
-- the source's conversation up to that step, and the effects the source
-- made before it move to the fork, in one transaction, so that no effect is
-- owned by both runs or by neither. The move changes the owner of each
-- action and compensation row (workflow_id): every query of a run's stack,
-- its fences and its rollback already reads that column, so the fork's saga
-- covers what it inherited and the source's no longer does. Keys stay what
-- they were: they are what the world saw.
--
-- forked_from and forked_at_step are the fork's link to its source;
-- forked_into is the source's to its fork (a run is forked once: fork the
-- fork to go again).
ALTER TABLE runs
    ADD COLUMN forked_from    text,
    ADD COLUMN forked_at_step integer CHECK (forked_at_step >= 1),
    ADD COLUMN forked_into    text;
CREATE INDEX runs_by_source ON runs (forked_from) WHERE forked_from IS NOT NULL;

-- fork_step is the step of the run's lineage an inherited action was made
-- at, written when it moves: its key names the step below the run that made
-- it, which a fork of a fork cannot read below its own ID.
ALTER TABLE actions ADD COLUMN fork_step integer;

-- +goose Down
ALTER TABLE actions DROP COLUMN fork_step;
DROP INDEX runs_by_source;
ALTER TABLE runs DROP COLUMN forked_into, DROP COLUMN forked_at_step, DROP COLUMN forked_from;
