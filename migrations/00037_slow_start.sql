-- +goose Up

-- A drain after an outage starts slow and ramps, as TCP does after a
-- timeout (issue 46, item 7). Until now the paced line of a breaker that a
-- probe had just closed ran at once at the dependency's learned release
-- rate (00018: 10 a second to start with), and the only thing between the
-- backlog and the dependency was the spacing of the release slots the gate
-- had handed out during the outage (00033: nine tenths of the rate less
-- the new calls measured then). That spacing is a guess made before the
-- dependency has answered anything, from an average: on a loaded machine
-- `agentsaga bench storm` measured 4.7 new calls a second during its
-- outage and got 7-8 after it, so the backlog came back at 4.4 a second on
-- top of 8 new calls against a service that takes 10; the seconds after
-- the outage held 11-14 requests, met 503s, and three in a row opened the
-- breaker again for a cooldown. Recovery took 4 to 23 s (9 and 10 s in
-- the two runs of this change's build before it).
--
-- Now a probe that closes the breaker after an outage in which new calls
-- kept coming (00033 counted first sends refused after the outage's first
-- cooldown) starts the drain's slow start: the line's rate for the
-- released calls, release_slow, begins at one release a second (never
-- above the learned rate, never below the floor: the probe's one success
-- says the dependency takes a call, not how many), and each released
-- success a booking carries while the line is in use adds a quarter
-- release a second (the rate doubles in about three seconds while the
-- calls succeed), up to the room the new calls leave (release_slow_peak:
-- 00033's nine tenths of the learned rate less the new calls' rate, never
-- below the floor). Past the room, and after the first retryable failure
-- while the line is in use, which halves release_slow (not below the
-- floor), each success adds the additive step (p_step), or, below nine
-- tenths of the slow rate that failed, a tenth of the way back to it when
-- that is more, as 00018's rate does. Once the slow rate reaches the
-- learned rate, the line runs at the learned rate, as before.
--
-- The line holds a released call no more than about 5 s: past that, each
-- booking raises the slow rate by a quarter until the line keeps up with
-- what comes to it. Without that bound, the calls that queued behind a
-- slow rate lower than their slots waited until their attempts' timeouts
-- (9.1 s in the storm), when the hook sends a call unpaced, and came out
-- together.
--
-- The room bounds the slow start so that the ramp does not go on, while
-- calls succeed, past what the new calls leave. Neither it nor the 5 s
-- bound stopped what came 11-24 s after the outage in every storm run of
-- this change: the backlog queued in the line while its rate was low went
-- out faster than the new calls left room for, met 503s, and three in a
-- row opened the breaker again (BENCHMARKS.md, "The drain starts slow
-- after an outage"). What the slow start buys is the seconds right after
-- the outage: recovery within 2 s.
--
-- An outage with no new calls after its first cooldown (a burst that met
-- it together, as in `agentsaga bench drain` and the single-tool outage of
-- `bench storm`) leaves nobody to share the dependency with: its drain
-- starts at the learned rate, as before (a slow start there took the
-- single-tool outage's longest run from 23 s to 35 s in a first try). A
-- slot the gate handed out still bounds a parked call from below: the line
-- only holds released calls back, never sends them early.
--
-- The learned rate (release_rate) is what the gate spaces the next
-- outage's slots at (00018, 00033); a drain that shares the dependency with
-- new calls says how much room they left, not what the dependency takes.
-- So while the slow start is on, the successes raise only release_slow,
-- and the failure that cuts release_slow leaves release_rate and
-- release_peak as they were (it still starts 00018's hold, so that the
-- failures of one congestion cut once). A declared rate
-- (p_release_interval_ms > 0) is the dependency's own word and is not
-- slowed. Nothing else changes: the gate, the probes and their backoff
-- (00020: 18 probes in 10 minutes), the fresh demand (00033).
--
-- Replaced here, with their signatures: 00020's 7-argument
-- agentsaga_breaker_pace and 12-argument agentsaga_breaker_report. A worker
-- of an older build calls the same functions and gets the slow start too.
ALTER TABLE circuit_breakers
    ADD COLUMN release_slow float8,
    ADD COLUMN release_slow_start boolean NOT NULL DEFAULT false,
    ADD COLUMN release_slow_peak float8;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION agentsaga_breaker_pace(p_dependency text, p_release_interval_ms float8, p_successes integer,
                                                  p_start float8, p_floor float8, p_ceiling float8, p_step float8)
RETURNS timestamptz
LANGUAGE plpgsql
AS $$
DECLARE
    v_now  timestamptz := clock_timestamp();
    v_rate float8;
    v_slow  float8;
    v_start boolean;
    v_gap   float8 := p_release_interval_ms;
    v_slot timestamptz;
    r      circuit_breakers%ROWTYPE;
BEGIN
    PERFORM agentsaga_release_check(p_start, p_floor, p_ceiling);
    IF v_gap IS NULL OR v_gap < 0 OR p_successes IS NULL OR p_successes < 0 OR p_step IS NULL OR p_step < 0 THEN
        RAISE EXCEPTION 'agentsaga_breaker_pace: the release interval % ms, the successes % and the step % must not be negative',
            p_release_interval_ms, p_successes, p_step
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT * INTO r FROM circuit_breakers b WHERE b.dependency = p_dependency FOR UPDATE;
    IF NOT FOUND THEN
        RETURN v_now;
    END IF;
    v_slot := greatest(r.paced_until, v_now);
    v_rate := r.release_rate;
    v_slow := r.release_slow;
    IF v_gap = 0 THEN
        v_rate := agentsaga_release_rate(r.release_rate, p_start, p_floor, p_ceiling);
        IF v_slow IS NOT NULL THEN
            -- The drain's slow start, or its additive increase after the
            -- first cut: the successes raise the slow rate, not the
            -- learned one.
            IF p_successes > 0 AND r.paced_until > v_now THEN
                IF r.release_slow_start THEN
                    -- Up to the room the new calls left (release_slow_peak
                    -- in a slow start), not past it.
                    v_slow := least(v_slow + 0.25 * p_successes, greatest(v_slow, coalesce(r.release_slow_peak, v_rate)));
                ELSE
                    v_slow := greatest(v_slow + p_step * p_successes,
                                       v_slow + greatest(coalesce(r.release_slow_peak, 0) - v_slow, 0) * (1 - 0.9 ^ p_successes));
                END IF;
            END IF;
            v_slow := greatest(p_floor, v_slow);
            IF v_slot > v_now + interval '5 seconds' THEN
                -- The line holds a released call no more than about 5 s:
                -- its attempt's timeout ends a longer wait anyway, and the
                -- call goes then, unpaced (bench storm's calls time out
                -- after 10 s, and the hook sends them a second before).
                -- Past 5 s each booking raises the slow rate by a quarter,
                -- as a success does in the slow start, until the line keeps
                -- up with the calls that come to it: the slots the gate
                -- handed out pace them from then on. (Raised in proportion
                -- to the wait, up to doubling per booking, it overshot to
                -- the learned rate in a storm run and let the queue out at
                -- 10 a second.)
                v_slow := v_slow + 0.25;
            END IF;
            IF v_slow >= v_rate THEN
                v_slow := NULL; -- caught up with the learned rate: the line runs at it
            END IF;
        ELSIF p_successes > 0 AND r.paced_until > v_now THEN
            v_rate := least(p_ceiling,
                            greatest(v_rate + p_step * p_successes,
                                     v_rate + greatest(coalesce(r.release_peak, 0) - v_rate, 0) * (1 - 0.9 ^ p_successes)));
        END IF;
        v_gap := 1000 / coalesce(v_slow, v_rate);
    END IF;
    -- The slow start ends where it reached the room, or the learned rate.
    v_start := r.release_slow_start AND v_slow IS NOT NULL AND v_slow < coalesce(r.release_slow_peak, v_rate);
    UPDATE circuit_breakers b
    SET paced_until = v_slot + v_gap * interval '1 millisecond', release_rate = v_rate,
        release_slow = v_slow, release_slow_start = v_start
    WHERE b.dependency = p_dependency;
    RETURN v_slot;
END
$$;
-- +goose StatementEnd

-- 00020's report, which also starts the drain's slow start when a probe
-- closes the breaker, and, while a slow start or its additive increase is
-- on, turns 00018's cut into a cut of the slow rate.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION agentsaga_breaker_report(p_dependency text, p_success boolean, p_probe boolean,
                                                    p_threshold int, p_window_ms float8,
                                                    p_start float8, p_floor float8, p_ceiling float8, p_hold_ms float8,
                                                    p_cooldown_ms float8, p_max_cooldown_ms float8, p_steady_probes integer,
                                                    OUT state text, OUT failures integer, OUT open_since timestamptz,
                                                    OUT retry_at timestamptz)
LANGUAGE plpgsql
AS $$
DECLARE
    r       circuit_breakers%ROWTYPE;
    h       timestamptz;
    v_fresh boolean;
    v_rate  float8;
    v_room  float8;
BEGIN
    PERFORM agentsaga_probe_check(p_cooldown_ms, p_max_cooldown_ms, p_steady_probes);
    IF NOT p_success OR p_probe THEN
        -- Locked before 00018's report changes it, so that the reopening,
        -- the count, the close and the slow start are one change of the
        -- row.
        SELECT * INTO r FROM circuit_breakers b WHERE b.dependency = p_dependency FOR UPDATE;
    END IF;
    SELECT x.state, x.failures, x.open_since INTO state, failures, open_since
    FROM agentsaga_breaker_report(p_dependency, p_success, p_probe, p_threshold, p_window_ms,
                                  p_start, p_floor, p_ceiling, p_hold_ms) x;
    IF p_success THEN
        IF p_probe AND r.state = 'half-open' AND state = 'closed' THEN
            -- The probe closed the breaker. If new calls kept coming
            -- during the outage (00033's count: first sends refused after
            -- its first cooldown), they go on now: the drain starts slow.
            -- If not, it runs at the learned rate, and an earlier drain's
            -- slow rate is forgotten.
            --
            -- The slow start ends at the room the new calls leave: 00033's
            -- nine tenths of the learned rate less their rate (the first
            -- sends refused from a cooldown into the outage, over the time
            -- since, or over a cooldown if the outage was shorter), never
            -- below the floor. Past it the rate rises by steps only: a
            -- backlog queued in the line while the rate was low would
            -- otherwise leave at the higher rate the slow start reached,
            -- faster than its slots, and meet the new calls' busier
            -- seconds (the first try of this change: 503s and the breaker
            -- open again 15 s after the outage, in all five runs).
            v_fresh := coalesce(r.fresh_window = r.window_started_at AND r.fresh_count > 0, false);
            v_rate := agentsaga_release_rate(r.release_rate, p_start, p_floor, p_ceiling);
            IF v_fresh THEN
                v_room := greatest(p_floor, 0.9 * v_rate - r.fresh_count / greatest(
                              extract(epoch FROM clock_timestamp() - (r.fresh_from + p_cooldown_ms * interval '1 millisecond')),
                              p_cooldown_ms / 1000));
            END IF;
            UPDATE circuit_breakers b
            SET release_slow = CASE WHEN v_fresh THEN least(v_rate, v_room, greatest(p_floor, 1)) END,
                release_slow_start = v_fresh, release_slow_peak = CASE WHEN v_fresh THEN v_room END
            WHERE b.dependency = p_dependency;
        END IF;
        RETURN;
    END IF;
    IF r.release_slow IS NOT NULL AND state = 'closed' THEN
        SELECT b.release_hold_until INTO h FROM circuit_breakers b WHERE b.dependency = p_dependency;
        IF h IS DISTINCT FROM r.release_hold_until THEN
            -- 00018's report cut the rate: the slow rate is what the line
            -- ran at, so it is the one cut; the learned rate stays.
            UPDATE circuit_breakers b
            SET release_slow = greatest(p_floor, r.release_slow / 2), release_slow_start = false,
                release_slow_peak = 0.9 * r.release_slow,
                release_rate = r.release_rate, release_peak = r.release_peak
            WHERE b.dependency = p_dependency;
        END IF;
    END IF;
    IF state <> 'open' THEN
        RETURN;
    END IF;
    IF r.release_slow IS NOT NULL THEN
        -- The failure reopened the breaker: the learned rate stays (the
        -- next probe's close starts a slow start of its own).
        UPDATE circuit_breakers b
        SET release_rate = r.release_rate, release_peak = r.release_peak
        WHERE b.dependency = p_dependency;
    END IF;
    IF p_probe AND r.state = 'half-open' THEN
        -- The probe failed and opened the breaker again: one more failed
        -- probe of this outage (window_started_at is the outage's: a
        -- failed probe does not move it).
        UPDATE circuit_breakers b
        SET failed_probes = CASE WHEN r.failed_probes_window = r.window_started_at THEN r.failed_probes ELSE 0 END + 1,
            failed_probes_window = r.window_started_at
        WHERE b.dependency = p_dependency;
    END IF;
    SELECT b.opened_at + agentsaga_probe_interval(p_cooldown_ms, p_max_cooldown_ms, p_steady_probes,
                             CASE WHEN b.failed_probes_window = b.window_started_at THEN b.failed_probes ELSE 0 END)
                         * interval '1 millisecond'
    INTO retry_at
    FROM circuit_breakers b WHERE b.dependency = p_dependency;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- 00020's pace and report, as they were.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION agentsaga_breaker_pace(p_dependency text, p_release_interval_ms float8, p_successes integer,
                                                  p_start float8, p_floor float8, p_ceiling float8, p_step float8)
RETURNS timestamptz
LANGUAGE plpgsql
AS $$
DECLARE
    v_now  timestamptz := clock_timestamp();
    v_rate float8;
    v_gap  float8 := p_release_interval_ms;
    v_slot timestamptz;
    r      circuit_breakers%ROWTYPE;
BEGIN
    PERFORM agentsaga_release_check(p_start, p_floor, p_ceiling);
    IF v_gap IS NULL OR v_gap < 0 OR p_successes IS NULL OR p_successes < 0 OR p_step IS NULL OR p_step < 0 THEN
        RAISE EXCEPTION 'agentsaga_breaker_pace: the release interval % ms, the successes % and the step % must not be negative',
            p_release_interval_ms, p_successes, p_step
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT * INTO r FROM circuit_breakers b WHERE b.dependency = p_dependency FOR UPDATE;
    IF NOT FOUND THEN
        RETURN v_now;
    END IF;
    v_slot := greatest(r.paced_until, v_now);
    v_rate := r.release_rate;
    IF v_gap = 0 THEN
        v_rate := agentsaga_release_rate(r.release_rate, p_start, p_floor, p_ceiling);
        IF p_successes > 0 AND r.paced_until > v_now THEN
            v_rate := least(p_ceiling,
                            greatest(v_rate + p_step * p_successes,
                                     v_rate + greatest(coalesce(r.release_peak, 0) - v_rate, 0) * (1 - 0.9 ^ p_successes)));
        END IF;
        v_gap := 1000 / v_rate;
    END IF;
    UPDATE circuit_breakers b
    SET paced_until = v_slot + v_gap * interval '1 millisecond', release_rate = v_rate
    WHERE b.dependency = p_dependency;
    RETURN v_slot;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION agentsaga_breaker_report(p_dependency text, p_success boolean, p_probe boolean,
                                                    p_threshold int, p_window_ms float8,
                                                    p_start float8, p_floor float8, p_ceiling float8, p_hold_ms float8,
                                                    p_cooldown_ms float8, p_max_cooldown_ms float8, p_steady_probes integer,
                                                    OUT state text, OUT failures integer, OUT open_since timestamptz,
                                                    OUT retry_at timestamptz)
LANGUAGE plpgsql
AS $$
DECLARE
    r circuit_breakers%ROWTYPE;
BEGIN
    PERFORM agentsaga_probe_check(p_cooldown_ms, p_max_cooldown_ms, p_steady_probes);
    IF NOT p_success THEN
        SELECT * INTO r FROM circuit_breakers b WHERE b.dependency = p_dependency FOR UPDATE;
    END IF;
    SELECT x.state, x.failures, x.open_since INTO state, failures, open_since
    FROM agentsaga_breaker_report(p_dependency, p_success, p_probe, p_threshold, p_window_ms,
                                  p_start, p_floor, p_ceiling, p_hold_ms) x;
    IF p_success OR state <> 'open' THEN
        RETURN;
    END IF;
    IF p_probe AND r.state = 'half-open' THEN
        UPDATE circuit_breakers b
        SET failed_probes = CASE WHEN r.failed_probes_window = r.window_started_at THEN r.failed_probes ELSE 0 END + 1,
            failed_probes_window = r.window_started_at
        WHERE b.dependency = p_dependency;
    END IF;
    SELECT b.opened_at + agentsaga_probe_interval(p_cooldown_ms, p_max_cooldown_ms, p_steady_probes,
                             CASE WHEN b.failed_probes_window = b.window_started_at THEN b.failed_probes ELSE 0 END)
                         * interval '1 millisecond'
    INTO retry_at
    FROM circuit_breakers b WHERE b.dependency = p_dependency;
END
$$;
-- +goose StatementEnd
ALTER TABLE circuit_breakers DROP COLUMN release_slow, DROP COLUMN release_slow_start, DROP COLUMN release_slow_peak;
