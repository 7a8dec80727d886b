#!/usr/bin/env bash
# Make sure PostgreSQL and Redis answer on loopback, starting them when they are installed
# but down, and create the `qval` database. Prints `postgres=yes|no redis=yes|no`.
set -u

pg_up() { pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; }
redis_up() { [ "$(redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null)" = "PONG" ]; }

if ! pg_up && command -v pg_ctlcluster >/dev/null 2>&1; then
  for version in $(ls /etc/postgresql 2>/dev/null); do
    pg_ctlcluster --skip-systemctl-redirect "$version" main start >/dev/null 2>&1 || true
  done
  for _ in $(seq 1 30); do pg_up && break; sleep 0.5; done
fi
if ! redis_up && command -v redis-server >/dev/null 2>&1; then
  mkdir -p /var/lib/redis /var/log/redis 2>/dev/null || true
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/qval.log >/dev/null 2>&1 || true
  for _ in $(seq 1 30); do redis_up && break; sleep 0.3; done
fi

pg=no; redis=no
if pg_up; then
  pg=yes
  if ! psql -h 127.0.0.1 -U postgres -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname='qval'" | grep -q 1; then
    psql -h 127.0.0.1 -U postgres -d postgres -qc "CREATE DATABASE qval" >/dev/null
  fi
fi
redis_up && redis=yes
echo "postgres=$pg redis=$redis"
