#!/usr/bin/env bash
# `make up`: install, pick the database and broker, migrate, load the bundled datasets and
# start the web server, the Celery workers (scoring, containers, gpu, datasets) and Celery beat in the background on
# http://127.0.0.1:8000; then queue builds of the ALFWorld and MiniWoB datasets when they are not
# loaded yet (FrozenLake, a few seconds, is built inline) and the reference rows of the loaded ones.
#
# Without DATABASE_URL: the local PostgreSQL and Redis on loopback (started if installed
# but down). Where neither is available: an embedded SQLite file and an in-process worker.
set -eu
cd "$(dirname "$0")/.."
scripts/install.sh run
mkdir -p var/log var/run

if [ -z "${DATABASE_URL:-}" ]; then
  services=$(scripts/ensure-services.sh)
  if [ "$services" = "postgres=yes redis=yes" ]; then
    export DATABASE_URL=postgres://postgres@127.0.0.1:5432/qval
    export CELERY_BROKER_URL=${CELERY_BROKER_URL:-redis://127.0.0.1:6379/0}
    mode="PostgreSQL on 127.0.0.1:5432 and a Celery worker on Redis 127.0.0.1:6379"
  else
    export DATABASE_URL="sqlite:///$PWD/var/qval.sqlite3"
    export QVAL_INPROCESS_WORKER=1
    export QVAL_CACHE_URL=locmem://  # no Redis: rate limits count per web process
    mode="FALLBACK: embedded SQLite (var/qval.sqlite3) and an in-process worker ($services) — a laptop demo, not the tested set-up"
  fi
fi

PY=.venv/bin/python
$PY manage.py migrate --noinput -v 0
$PY manage.py collectstatic --noinput -v 0
$PY manage.py build_dataset frozenlake
$PY manage.py import_results   # QVal v1.0 published results (idempotent)

scripts/down.sh >/dev/null 2>&1 || true
env | grep -E '^(DATABASE_URL|CELERY_BROKER_URL|QVAL_INPROCESS_WORKER|QVAL_CACHE_URL)=' > var/run/env || true
if [ -z "${QVAL_INPROCESS_WORKER:-}" ]; then
  # Every worker runs under supervise.sh, started again if it exits (a Redis restart can make one exit).
  nohup scripts/supervise.sh .venv/bin/celery -A qval_site worker -Q scoring -c 1 -n "scoring@%h" --loglevel INFO \
    > var/log/worker.log 2>&1 &
  echo $! > var/run/worker.pid
  # Celery beat, a process of its own: it sends the reapers (lost jobs, deadlines, unsent messages),
  # so they keep running whichever worker dies; supervise.sh starts it again if it dies. Run exactly one.
  nohup scripts/supervise.sh .venv/bin/celery -A qval_site beat -s var/run/celerybeat-schedule --loglevel INFO \
    > var/log/beat.log 2>&1 &
  echo $! > var/run/beat.pid
  # Users' method containers: a worker of their own, never behind the platform's runs; one job at a time;
  # rootful podman (qval/containers.py).
  nohup scripts/supervise.sh .venv/bin/celery -A qval_site worker -Q containers --concurrency 1 -n "containers@%h" --loglevel INFO \
    > var/log/containers-worker.log 2>&1 &
  echo $! > var/run/containers-worker.pid
  # The platform's own runs with a model: LLM baseline rows, training and Best-of-N runs; one at a time. Its model
  # server's torch takes the cores the other workers leave idle, measured every second (QVAL_GPU_WORKER_THREADS:
  # auto by default, or a number): on 2 cores, 2 threads beat 1 alone and lose by 2.1 times beside a busy worker
  # (benchmarks/README.md, "Threads of the gpu worker"). Everything else in it runs on one thread.
  OMP_NUM_THREADS=1 nohup scripts/supervise.sh .venv/bin/celery -A qval_site worker -Q gpu --concurrency 1 -n "gpu@%h" --loglevel INFO \
    > var/log/gpu-worker.log 2>&1 &
  echo $! > var/run/gpu-worker.pid
  # Dataset builds: one at a time (minutes each); progress on /datasets/. Stopped at once (cold shutdown):
  # the build resumes from its checkpoint when it is queued again (make up does).
  SUPERVISE_STOP_SIGNAL=QUIT nohup scripts/supervise.sh .venv/bin/celery -A qval_site worker -Q datasets --concurrency 1 -n "datasets@%h" --loglevel INFO \
    > var/log/datasets-worker.log 2>&1 &
  echo $! > var/run/datasets-worker.pid
  # TerminalBench-lite runs its shell commands in an image of its own (offline from Debian packages, cached).
  scripts/build-terminal-image.sh >> var/log/terminal-image.log 2>&1 \
    || echo "the terminal image did not build (var/log/terminal-image.log): terminalbench-lite's build will fail with that reason"
  $PY manage.py build_dataset alfworld alfworld-all-types miniwob terminalbench-lite --queue --if-missing --workers-stopped
fi
# Reference rows on every loaded hosted dataset, queued behind every user's job (idempotent): random, constant, step index and
# FrozenLake's goal distance on the test split, the three learned methods trained on the train split, and
# Best-of-N runs of the base, oracle and random pickers. A dataset still building gets its own when its build finishes.
$PY manage.py seed_reference_rows
nohup .venv/bin/gunicorn qval_site.wsgi -b 127.0.0.1:8000 -w 2 --timeout 120 \
  > var/log/web.log 2>&1 &
echo $! > var/run/web.pid
for _ in $(seq 1 60); do
  curl -fsS -o /dev/null http://127.0.0.1:8000/ 2>/dev/null && break
  sleep 0.5
done
echo "QVal is up on http://127.0.0.1:8000 using $mode"
echo "logs: var/log/web.log var/log/worker.log var/log/beat.log var/log/containers-worker.log var/log/gpu-worker.log var/log/datasets-worker.log; stop with: make down"
