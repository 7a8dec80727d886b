#!/usr/bin/env bash
# supervise.sh CMD...: run CMD and start it again 5 s after it exits, whatever the reason (a crash, kill -9,
# a Celery worker's "Unrecoverable error" when its broker goes away mid-acknowledgement); TERM or INT stops
# CMD and this loop, with the signal $SUPERVISE_STOP_SIGNAL (default TERM; QUIT: a Celery worker's cold
# shutdown). Signal this script with TERM: started in the background by a script, it cannot trap QUIT or INT.
# `make up` runs Celery beat and the workers under it (docker-compose restarts its services instead:
# restart: unless-stopped).
set -u
child=
stop() { [ -n "$child" ] && kill -s "${SUPERVISE_STOP_SIGNAL:-TERM}" "$child" 2>/dev/null; wait "$child" 2>/dev/null; exit 0; }
trap stop TERM INT
while :; do
  "$@" &
  child=$!
  wait "$child"
  echo "supervise.sh: $1 exited with status $?; starting it again in 5 s" >&2
  sleep 5 & wait $!
done
