#!/usr/bin/env bash
# Stop the web server, workers and beat that `make up` started.
cd "$(dirname "$0")/.."
for name in web beat worker containers-worker gpu-worker datasets-worker; do
  f=var/run/$name.pid
  if [ -f "$f" ]; then
    pid=$(cat "$f")
    # Workers and beat run under supervise.sh, which passes the stop on (the datasets worker's as QUIT: up.sh).
    kill -s TERM "$pid" 2>/dev/null && echo "stopped $name ($pid)"
    for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    rm -f "$f"
  fi
done
