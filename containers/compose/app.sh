#!/bin/sh
# Entry point of the app services of docker-compose.yml: wait for PostgreSQL and Redis
# (manage.py wait_ready; every role but web also waits for web's migrations), then start one role.
#
#   app.sh web        migrate, collect static files, build + load FrozenLake when missing, gunicorn on :8000
#   app.sh scoring    Celery worker on the scoring queue (scale it: --scale scoring=4)
#   app.sh beat       Celery beat: sends the reapers every minute (run exactly one)
#   app.sh datasets   Celery worker on the datasets queue (needs the packages of requirements.txt
#                     for ALFWorld and MiniWoB; FrozenLake builds with the site's)
#   app.sh containers Celery worker on the containers queue: users' method containers through podman
#                     (privileged), never behind the platform's runs
#   app.sh gpu        Celery worker on the gpu queue: the platform's runs with a model (LLM baseline rows,
#                     training and Best-of-N runs)
set -eu
role=${1:?usage: app.sh web|scoring|beat|datasets|containers|gpu}
cd /app
migrated=--migrated; [ "$role" = web ] && migrated=   # web migrates; the others wait for it
python manage.py wait_ready --timeout "${QVAL_WAIT_READY_S:-300}" $migrated
case "$role" in
  web)
    python manage.py migrate --noinput -v 0
    python manage.py collectstatic --noinput -v 0
    if [ "${QVAL_BUILD_FROZENLAKE:-1}" = 1 ]; then
      python manage.py build_dataset frozenlake --if-missing
    fi
    exec gunicorn qval_site.wsgi -b 0.0.0.0:8000 -w "${WEB_CONCURRENCY:-2}" --timeout 120 \
      --access-logfile - --forwarded-allow-ips '*'
    ;;
  scoring)
    exec celery -A qval_site worker -Q scoring -c "${SCORING_CONCURRENCY:-2}" -n "scoring@%h" --loglevel INFO
    ;;
  beat)
    exec celery -A qval_site beat -s /data/run/celerybeat-schedule --loglevel INFO
    ;;
  datasets)
    exec celery -A qval_site worker -Q datasets -c 1 -n "datasets@%h" --loglevel INFO
    ;;
  containers)
    exec celery -A qval_site worker -Q containers -c 1 -n "containers@%h" --loglevel INFO
    ;;
  gpu)
    # one CPU thread but for the model server's, which follows the idle cores (docs/configuration.md:
    # QVAL_GPU_WORKER_THREADS)
    OMP_NUM_THREADS=1 exec celery -A qval_site worker -Q gpu -c 1 -n "gpu@%h" --loglevel INFO
    ;;
  *)
    echo "app.sh: unknown role $role (web, scoring, beat, datasets, containers, gpu)" >&2
    exit 2
    ;;
esac
