#!/bin/sh
# PostgreSQL of docker-compose.yml (Debian's postgresql in localhost/qval-debian): create the
# cluster and the database on first start, then run the server as user postgres in the foreground.
set -eu
data=/var/lib/postgresql/data
bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
as_postgres() { setpriv --reuid=postgres --regid=postgres --init-groups "$@"; }
mkdir -p "$data" /run/postgresql
chown postgres:postgres "$data" /run/postgresql
chmod 700 "$data"
if [ ! -s "$data/PG_VERSION" ]; then
  : "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD (see .env.example)}"
  pwfile=$(mktemp)
  printf '%s' "$POSTGRES_PASSWORD" > "$pwfile"
  chown postgres "$pwfile"
  as_postgres "$bin/initdb" -D "$data" -U postgres --pwfile="$pwfile" --auth-local=trust \
    --auth-host=scram-sha-256 -E UTF8 --locale=C.UTF-8 >/dev/null
  rm -f "$pwfile"
  printf 'host all all 0.0.0.0/0 scram-sha-256\nhost all all ::/0 scram-sha-256\n' >> "$data/pg_hba.conf"
  as_postgres "$bin/pg_ctl" -D "$data" -w -o "-c listen_addresses=''" start >/dev/null
  as_postgres "$bin/createdb" -h /run/postgresql -U postgres "${POSTGRES_DB:-qval}"
  as_postgres "$bin/pg_ctl" -D "$data" -w stop >/dev/null
fi
exec setpriv --reuid=postgres --regid=postgres --init-groups "$bin/postgres" -D "$data" \
  -c listen_addresses='*' -c unix_socket_directories=/run/postgresql
