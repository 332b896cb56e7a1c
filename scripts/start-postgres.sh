#!/usr/bin/env bash
# Starts a throw-away PostgreSQL server on 127.0.0.1 for the tests and
# prints the DSN to use. Usage: eval "$(scripts/start-postgres.sh DIR PORT)"
set -euo pipefail
dir=${1:?dir}; port=${2:-55432}
pgbin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
mkdir -p "$dir"; chown postgres: "$dir"
if [ ! -f "$dir/PG_VERSION" ]; then
  runuser -u postgres -- "$pgbin/initdb" -D "$dir" -A trust -U postgres >/dev/null
fi
if ! runuser -u postgres -- "$pgbin/pg_ctl" -D "$dir" status >/dev/null 2>&1; then
  runuser -u postgres -- "$pgbin/pg_ctl" -D "$dir" -l "$dir/server.log" -w \
    -o "-p $port -k /tmp -c listen_addresses=127.0.0.1 -c fsync=off" start >/dev/null
fi
echo "export WARREN_TEST_POSTGRES_DSN='postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable'"
echo "export WARREN_TEST_POSTGRES_STOP='runuser -u postgres -- $pgbin/pg_ctl -D $dir -m fast stop'"
