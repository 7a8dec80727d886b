#!/usr/bin/env bash
# supervise.sh CMD...: run CMD and start it again 5 s after it exits, whatever the reason (a crash, kill -9);
# TERM or INT stops CMD and this loop. `make up` runs Celery beat under it (docker-compose restarts its
# beat service instead: restart: unless-stopped).
set -u
child=
stop() { [ -n "$child" ] && kill -TERM "$child" 2>/dev/null; wait "$child" 2>/dev/null; exit 0; }
trap stop TERM INT
while :; do
  "$@" &
  child=$!
  wait "$child"
  echo "supervise.sh: $1 exited with status $?; starting it again in 5 s" >&2
  sleep 5 & wait $!
done
