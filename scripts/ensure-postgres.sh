#!/usr/bin/env bash
# Makes sure the Postgres server that DATABASE_URL names answers, and that
# its database exists. On this machine's kind a local PostgreSQL is normally
# running; when it is down it is started, and when it is absent it is
# installed from Debian's packages (local servers only).
set -euo pipefail

url="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/agentsaga?sslmode=disable}"
# postgres://user[:pass]@host[:port]/db?params -> the parts we need.
rest="${url#*://}"; creds="${rest%%@*}"; rest="${rest#*@}"
hostport="${rest%%/*}"; db="${rest#*/}"; db="${db%%\?*}"
host="${hostport%%:*}"; port="${hostport##*:}"; [ "$port" = "$hostport" ] && port=5432
user="${creds%%:*}"
admin_url="${url/\/$db/\/postgres}"

is_local() { [[ "$host" == "127.0.0.1" || "$host" == "localhost" || "$host" == "::1" ]]; }

install_postgres() {
  echo "postgres: not installed; installing Debian's postgresql" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq postgresql >/dev/null
  local version; version=$(ls /etc/postgresql | sort -V | tail -n 1)
  # A fresh Debian cluster asks for a password on TCP; the dev and test
  # setup uses trust for the local superuser, as this machine's kind does.
  sed -i '1i host all postgres 127.0.0.1/32 trust\nhost all postgres ::1/128 trust' "/etc/postgresql/$version/main/pg_hba.conf"
}

start_postgres() {
  local version; version=$(ls /etc/postgresql | sort -V | tail -n 1)
  echo "postgres: starting cluster $version/main" >&2
  pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
}

if ! command -v pg_isready >/dev/null 2>&1; then
  is_local || { echo "postgres: pg_isready missing and $host is not local" >&2; exit 1; }
  install_postgres
fi

if ! pg_isready -q -h "$host" -p "$port" -t 2; then
  is_local || { echo "postgres: $host:$port does not answer (DATABASE_URL)" >&2; exit 1; }
  [ -d /etc/postgresql ] && [ -n "$(ls /etc/postgresql 2>/dev/null)" ] || install_postgres
  start_postgres
  for _ in $(seq 1 30); do pg_isready -q -h "$host" -p "$port" -t 1 && break; sleep 1; done
  pg_isready -q -h "$host" -p "$port" -t 2 || { echo "postgres: $host:$port still does not answer" >&2; exit 1; }
fi

if ! psql "$admin_url" -Atqc "SELECT 1 FROM pg_database WHERE datname = '$db'" | grep -q 1; then
  echo "postgres: creating database $db" >&2
  psql "$admin_url" -qc "CREATE DATABASE \"$db\""
fi
echo "postgres: $host:$port/$db ready (user $user)"
