-- +goose Up

-- A cap's admit ('run' or 'turn', migration 00029) is set with the cap
-- (agentsaga spend set --admit) and kept in its change history beside the
-- cap's other fields: agentsaga_spend_set_cap takes it, and a change of
-- admit alone is a change. The admission metrics get an index.

-- +goose StatementBegin
CREATE FUNCTION agentsaga_spend_set_cap(p_account text, p_period text, p_time_zone text, p_usd numeric,
                                        p_on_exhausted text, p_finish_reserve numeric, p_admit text, p_by text)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_old jsonb;
    v_new jsonb;
BEGIN
    PERFORM clock_timestamp() AT TIME ZONE p_time_zone; -- an unknown zone fails here
    SELECT jsonb_build_object('usd', c.usd, 'time_zone', c.time_zone, 'on_exhausted', c.on_exhausted,
                              'finish_reserve', c.finish_reserve, 'admit', c.admit) INTO v_old
    FROM spend_caps c WHERE c.account = p_account AND c.period = p_period FOR UPDATE;
    IF p_usd IS NULL THEN
        DELETE FROM spend_caps c WHERE c.account = p_account AND c.period = p_period;
    ELSE
        INSERT INTO spend_caps (account, period, time_zone, usd, on_exhausted, finish_reserve, admit, updated_by)
        VALUES (p_account, p_period, p_time_zone, p_usd, p_on_exhausted, p_finish_reserve, p_admit, p_by)
        ON CONFLICT (account, period) DO UPDATE
        SET time_zone = excluded.time_zone, usd = excluded.usd, on_exhausted = excluded.on_exhausted,
            finish_reserve = excluded.finish_reserve, admit = excluded.admit, updated_by = excluded.updated_by,
            updated_at = clock_timestamp();
        v_new := jsonb_build_object('usd', p_usd, 'time_zone', p_time_zone, 'on_exhausted', p_on_exhausted,
                                    'finish_reserve', p_finish_reserve, 'admit', p_admit);
    END IF;
    IF v_old IS DISTINCT FROM v_new THEN
        INSERT INTO spend_cap_changes (account, period, old, new, changed_by) VALUES (p_account, p_period, v_old, v_new, p_by);
    END IF;
    RETURN v_old;
END
$$;
-- +goose StatementEnd

DROP FUNCTION agentsaga_spend_set_cap(text, text, text, numeric, text, numeric, text);

-- The metrics read the waits of the runs admitted in the last hour.
CREATE INDEX run_admissions_admitted ON run_admissions (admitted_at);

-- +goose Down

DROP INDEX run_admissions_admitted;

-- +goose StatementBegin
CREATE FUNCTION agentsaga_spend_set_cap(p_account text, p_period text, p_time_zone text, p_usd numeric,
                                        p_on_exhausted text, p_finish_reserve numeric, p_by text)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_old jsonb;
    v_new jsonb;
BEGIN
    PERFORM clock_timestamp() AT TIME ZONE p_time_zone; -- an unknown zone fails here
    SELECT jsonb_build_object('usd', c.usd, 'time_zone', c.time_zone, 'on_exhausted', c.on_exhausted,
                              'finish_reserve', c.finish_reserve) INTO v_old
    FROM spend_caps c WHERE c.account = p_account AND c.period = p_period FOR UPDATE;
    IF p_usd IS NULL THEN
        DELETE FROM spend_caps c WHERE c.account = p_account AND c.period = p_period;
    ELSE
        INSERT INTO spend_caps (account, period, time_zone, usd, on_exhausted, finish_reserve, updated_by)
        VALUES (p_account, p_period, p_time_zone, p_usd, p_on_exhausted, p_finish_reserve, p_by)
        ON CONFLICT (account, period) DO UPDATE
        SET time_zone = excluded.time_zone, usd = excluded.usd, on_exhausted = excluded.on_exhausted,
            finish_reserve = excluded.finish_reserve, updated_by = excluded.updated_by, updated_at = clock_timestamp();
        v_new := jsonb_build_object('usd', p_usd, 'time_zone', p_time_zone, 'on_exhausted', p_on_exhausted,
                                    'finish_reserve', p_finish_reserve);
    END IF;
    IF v_old IS DISTINCT FROM v_new THEN
        INSERT INTO spend_cap_changes (account, period, old, new, changed_by) VALUES (p_account, p_period, v_old, v_new, p_by);
    END IF;
    RETURN v_old;
END
$$;
-- +goose StatementEnd

DROP FUNCTION agentsaga_spend_set_cap(text, text, text, numeric, text, numeric, text, text);
