package ledgertest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/agentsaga/agentsaga/internal/ledgerdb"
)

// Admission by run (migration 00029): what the tests of the ledger and of
// the dev server check after each test. LogAdmissions keeps a log of
// every admission in the test's database; AdmissionViolations counts what
// breaks the invariants.

// admissionLog records every admission (a run_admissions row becoming
// 'admitted') in the test's own database, with how many runs its root,
// and its model, had admitted then: a run logged twice was admitted twice.
const admissionLog = `
CREATE TABLE test_admissions (n bigserial PRIMARY KEY, run_id text NOT NULL, account text NOT NULL, held numeric NOT NULL,
                              root_running bigint NOT NULL, model_running bigint NOT NULL);
CREATE FUNCTION test_admission_logged() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status = 'admitted' AND (TG_OP = 'INSERT' OR OLD.status IS DISTINCT FROM 'admitted') THEN
        INSERT INTO test_admissions (run_id, account, held, root_running, model_running)
        VALUES (NEW.run_id, NEW.account, NEW.held,
                (SELECT count(*) FROM run_admissions r WHERE r.status = 'admitted' AND r.root = NEW.root),
                (SELECT count(*) FROM run_admissions r WHERE r.status = 'admitted' AND r.quota_key = NEW.quota_key));
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER test_admission_logged AFTER INSERT OR UPDATE OF status ON run_admissions
FOR EACH ROW EXECUTE FUNCTION test_admission_logged();`

// LogAdmissions installs the admission log in store's database (a test's
// own).
func LogAdmissions(t testing.TB, store *ledgerdb.Store) {
	t.Helper()
	if _, err := store.Pool().Exec(context.Background(), admissionLog); err != nil {
		t.Fatalf("ledgertest: log admissions: %v", err)
	}
}

// AdmittedOrder is the runs in the order they were admitted.
func AdmittedOrder(t testing.TB, store *ledgerdb.Store) []string {
	t.Helper()
	rows, err := store.Pool().Query(context.Background(), `SELECT run_id FROM test_admissions ORDER BY n`)
	if err != nil {
		t.Fatalf("ledgertest: admitted order: %v", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("ledgertest: admitted order: %v", err)
	}
	return ids
}

// MaxAdmittedAtOnce is the most runs of account's tree admitted at once,
// as each admission found them.
func MaxAdmittedAtOnce(t testing.TB, store *ledgerdb.Store, account string) int {
	t.Helper()
	var n int
	if err := store.Pool().QueryRow(context.Background(), `SELECT coalesce(max(root_running), 0) FROM test_admissions
		WHERE account = $1 OR starts_with(account, $1 || '/')`, account).Scan(&n); err != nil {
		t.Fatalf("ledgertest: admitted at once: %v", err)
	}
	return n
}

// reservationMismatch finds the period rows whose reserved is not what
// the admitted runs' reservations (held), the calls' holds (usd) and what
// the calls drew from their runs (from_run, held in the run's periods)
// add up to in them.
const reservationMismatch = `
WITH expect AS (
    SELECT x.account, x.period, x.starts, a.held AS usd
    FROM run_admissions a, unnest(a.accounts, a.periods, a.starts) AS x(account, period, starts)
    WHERE a.status = 'admitted'
    UNION ALL
    SELECT x.account, x.period, x.starts, h.usd
    FROM spend_holds h, unnest(h.accounts, h.periods, h.starts) AS x(account, period, starts)
    UNION ALL
    SELECT x.account, x.period, x.starts, h.from_run
    FROM spend_holds h JOIN run_admissions a ON a.run_id = h.run_id, unnest(a.accounts, a.periods, a.starts) AS x(account, period, starts)
    WHERE h.from_run <> 0
    UNION ALL
    -- A cap the run's reservation is not held in holds the whole call.
    SELECT x.account, x.period, x.starts, h.from_run
    FROM spend_holds h JOIN run_admissions a ON a.run_id = h.run_id, unnest(h.accounts, h.periods, h.starts) AS x(account, period, starts)
    WHERE h.from_run <> 0
      AND NOT EXISTS (SELECT 1 FROM unnest(a.accounts, a.periods) AS r(account, period) WHERE r.account = x.account AND r.period = x.period)
), e AS (SELECT account, period, starts, sum(usd) AS usd FROM expect GROUP BY account, period, starts)
SELECT coalesce(sp.account, e.account) || ' ' || coalesce(sp.period, e.period) || ' ' || coalesce(sp.starts, e.starts)::text
       || ': reserved $' || coalesce(sp.reserved, 0)::text || ', held by runs and calls $' || coalesce(e.usd, 0)::text
FROM spend_periods sp FULL JOIN e ON e.account = sp.account AND e.period = sp.period AND e.starts = sp.starts
WHERE abs(coalesce(sp.reserved, 0) - coalesce(e.usd, 0)) > 1e-9`

// AdmissionViolations counts (and reports with t.Errorf) what breaks the
// invariants of admission now: a run admitted twice (LogAdmissions must
// have been installed), a period row that does not hold exactly what the
// runs and calls hold in it, a period that spent and holds more than its
// cap (a test that lowered a cap checks after raising it again), a run
// that holds less than nothing or holds while not admitted; and, when
// ended says every run has ended, anything still held.
func AdmissionViolations(ctx context.Context, t testing.TB, store *ledgerdb.Store, ended bool) int {
	t.Helper()
	n := 0
	violation := func(format string, args ...any) {
		n++
		t.Errorf("violation: "+format, args...)
	}
	strings := func(sql string) []string {
		rows, err := store.Pool().Query(ctx, sql)
		if err != nil {
			t.Fatalf("ledgertest: admission violations: %v", err)
		}
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatalf("ledgertest: admission violations: %v", err)
		}
		return out
	}
	count := func(sql string) int {
		var c int
		if err := store.Pool().QueryRow(ctx, sql).Scan(&c); err != nil {
			t.Fatalf("ledgertest: admission violations: %v", err)
		}
		return c
	}
	if doubles := count(`SELECT count(*) - count(DISTINCT run_id) FROM test_admissions`); doubles > 0 {
		violation("%d admissions of a run admitted already", doubles)
	}
	for _, m := range strings(reservationMismatch) {
		violation("%s", m)
	}
	for _, o := range strings(`
		SELECT sp.account || ' ' || sp.period || ' ' || sp.starts::text || ': spent $' || sp.spent::text || ' and holds $'
		       || sp.reserved::text || ' of a $' || c.usd::text || ' cap'
		FROM spend_periods sp JOIN spend_caps c ON c.account = sp.account AND c.period = sp.period
		WHERE sp.spent + sp.reserved > c.usd + 1e-9 OR sp.reserved < -1e-9`) {
		violation("%s", o)
	}
	if bad := count(`SELECT count(*) FROM run_admissions WHERE held < 0 OR (status <> 'admitted' AND held <> 0)`); bad > 0 {
		violation("%d admissions hold less than nothing, or hold while not admitted", bad)
	}
	if ended {
		held, admitted, err := store.AdmissionHeld(ctx)
		if err != nil {
			t.Fatalf("ledgertest: admission violations: %v", err)
		}
		if held != 0 || admitted != 0 {
			violation("every run ended, and %d runs are still admitted, holding $%.6f", admitted, held)
		}
		if periods := count(`SELECT count(*) FROM spend_periods WHERE reserved <> 0`); periods != 0 {
			violation("every run ended, and %d periods still hold a reservation", periods)
		}
		if holds := count(`SELECT count(*) FROM spend_holds`); holds != 0 {
			violation("every run ended, and %d calls still hold", holds)
		}
	}
	return n
}

// MoveClock moves the ledger's clock a period on, as far as its caps of
// period can tell: every row naming such a period (the periods, the runs'
// reservations, the calls' holds) is shifted back by one, so that now is
// the next period, and what the last one spent no longer counts.
func MoveClock(ctx context.Context, t testing.TB, store *ledgerdb.Store, period string) {
	t.Helper()
	for _, sql := range []string{
		`UPDATE spend_periods SET starts = starts - ('1 ' || period)::interval, resets = resets - ('1 ' || period)::interval
		 WHERE period = $1`,
		`UPDATE run_admissions a SET starts = (SELECT array_agg(CASE WHEN x.period = $1 THEN x.starts - ('1 ' || x.period)::interval
		                                                            ELSE x.starts END ORDER BY x.i)
		                                       FROM unnest(a.periods, a.starts) WITH ORDINALITY AS x(period, starts, i))
		 WHERE $1 = ANY (a.periods)`,
		`UPDATE spend_holds h SET starts = (SELECT array_agg(CASE WHEN x.period = $1 THEN x.starts - ('1 ' || x.period)::interval
		                                                       ELSE x.starts END ORDER BY x.i)
		                                  FROM unnest(h.periods, h.starts) WITH ORDINALITY AS x(period, starts, i))
		 WHERE $1 = ANY (h.periods)`,
	} {
		if _, err := store.Pool().Exec(ctx, sql, period); err != nil {
			t.Fatalf("ledgertest: move the clock a %s on: %v", period, err)
		}
	}
}
