#!/usr/bin/env bash
# Samples how many client connections Postgres has, every 200 ms, and prints
# the peak (with the databases that held them at that moment) when stopped.
#
#   scripts/pgpeak.sh                       # until Ctrl-C / SIGTERM
#   scripts/pgpeak.sh go test ./internal/ledgerdb      # while the command runs; exits with its status
#
# With a command it also reports the peak of the command's own connections:
# it runs the command with PGAPPNAME=pgpeak-<pid>, which libpq and pgx (and
# so the test binaries, the workers they start, psql and pgbench) send as
# application_name, so other programs on the same server are told apart.
# PGHOST/PGPORT/PGUSER choose the server (127.0.0.1:5432, postgres). It keeps
# one psql session open (a new psql per sample takes longer than the period
# on a loaded machine) and does not count that session.
# PGPEAK_INTERVAL sets the period in seconds.
set -uo pipefail

export PGHOST="${PGHOST:-127.0.0.1}" PGPORT="${PGPORT:-5432}" PGUSER="${PGUSER:-postgres}"
interval="${PGPEAK_INTERVAL:-0.2}"
app="pgpeak-$$"
query="select count(*), count(*) filter (where application_name = '$app'),
    coalesce(string_agg(datname, ' ' order by datname), '')
  from (select coalesce(datname, '-') || case when application_name = '$app' then '' else '(other)' end as datname, application_name
        from pg_stat_activity
        where backend_type = 'client backend' and pid <> pg_backend_pid()) c;"
query="${query//$'\n'/ }"

peak=-1 peak_at="" peak_dbs="" own=-1 own_at="" own_dbs="" samples=0 failed=0
summarize() { tr ' ' '\n' <<<"$1" | sort | uniq -c | sort -rn | awk '{printf "%s%s:%d", (NR>1?" ":""), $2, $1}'; }
report() {
  if [ -n "${PSQL_PID:-}" ]; then kill "$PSQL_PID" 2>/dev/null; fi
  echo "pgpeak: peak $peak client connections in all at $peak_at ($samples samples every ${interval}s, $failed failed)" >&2
  if [ -n "$peak_dbs" ]; then echo "pgpeak:   at that peak: $(summarize "$peak_dbs")" >&2; fi
  if [ "$own" -ge 0 ]; then
    echo "pgpeak: peak $own client connections of the command's own ($app) at $own_at" >&2
    if [ -n "$own_dbs" ]; then echo "pgpeak:   at that peak: $(summarize "$own_dbs")" >&2; fi
  fi
}

start_psql() {
  coproc PSQL { PGAPPNAME=pgpeak-sampler exec psql -d postgres -XAtq -F '|' 2>/dev/null; }
}

sample() {
  local line n mine dbs
  if [ -z "${PSQL_PID:-}" ] || ! kill -0 "$PSQL_PID" 2>/dev/null; then start_psql; fi
  if ! { echo "$query" >&"${PSQL[1]}" && IFS= read -r -t 5 line <&"${PSQL[0]}"; } 2>/dev/null \
     || [[ ! "$line" =~ ^[0-9]+\|[0-9]+\| ]]; then
    failed=$((failed + 1)); kill "${PSQL_PID:-}" 2>/dev/null; PSQL_PID=""; return
  fi
  samples=$((samples + 1))
  IFS='|' read -r n mine dbs <<<"$line"
  if [ "$n" -gt "$peak" ]; then
    peak=$n peak_at=$(date +%T.%N | cut -c1-12) peak_dbs=$dbs
  fi
  if [ "$track_own" = 1 ] && [ "$mine" -gt "$own" ]; then
    own=$mine own_at=$(date +%T.%N | cut -c1-12)
    own_dbs=$(tr ' ' '\n' <<<"$dbs" | grep -v '(other)$' | tr '\n' ' ')
    own_dbs="${own_dbs% }"
  fi
}

if [ $# -eq 0 ]; then
  track_own=0
  trap 'report; exit 0' INT TERM
  while :; do sample; sleep "$interval"; done
fi

track_own=1
PGAPPNAME="$app" "$@" &
child=$!
trap 'kill -TERM "$child" 2>/dev/null' INT TERM
while kill -0 "$child" 2>/dev/null; do sample; sleep "$interval"; done
wait "$child"; status=$?
report
exit "$status"
