#!/usr/bin/env bash
# Stop the web server and workers that `make up` started.
cd "$(dirname "$0")/.."
for name in web worker gpu-worker; do
  f=var/run/$name.pid
  if [ -f "$f" ]; then
    pid=$(cat "$f")
    kill "$pid" 2>/dev/null && echo "stopped $name ($pid)"
    for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    rm -f "$f"
  fi
done
