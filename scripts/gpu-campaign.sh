#!/usr/bin/env bash
# One command for a GPU campaign (docs/campaign.md): on a machine with a GPU, serve a real backbone from a local
# path with `vllm serve`, run every text method of qval.methods on every hosted dataset through the remote-worker
# protocol, and let the rows arrive on the site as verified baseline runs.
#
#   scripts/gpu-campaign.sh --site https://qval.example.org --broker redis://broker:6379/0 --key "$QVAL_WORKER_KEY" \
#       --model /models/Qwen2.5-7B-Instruct --name qwen2.5-7b [--description TEXT] [--vllm-arg ARG ...] \
#       [--datasets SLUG,...] [--methods NAME,...] [--targets q,v] [--timeout S]
#
# It starts a remote worker (celery -A qval.remote_worker, queue `campaign`, no database settings) whose
# QVAL_BACKBONES names the model as a `kind: vllm` backbone: the worker starts `vllm serve MODEL --served-model-name
# NAME [ARGS]` at its first job, waits until it is healthy and reuses it. Then `python -m qval.campaign` asks the
# site to register the backbone and queue the runs (only the missing ones: running it again resumes), and follows
# them until each has ended. At the end (or on Ctrl-C) the worker and its vLLM server are stopped.
#
# Stand-ins where vLLM cannot run (CPU machines, the test): `--vllm CMD` names another executable with vLLM's
# command line (scripts/vllm-standin serves the model with our transformers server), and `--url URL` uses a
# server that already runs (`kind: upstream`; then --model is not needed, --served-model is the model it serves).
# Exit status: 0 when every run finished, 1 when one failed or the campaign was refused, 2 at --timeout.
set -euo pipefail
cd "$(dirname "$0")/.."

site="" broker="" key="" model="" name="" description="" url="" served="" vllm="${QVAL_VLLM_EXECUTABLE:-vllm}"
datasets="" methods="" targets="" timeout="604800" data_dir="${QVAL_DATA_DIR:-var/campaign}"
vllm_args=()
usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-1}"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --site) site="$2"; shift 2 ;;
    --broker) broker="$2"; shift 2 ;;
    --key) key="$2"; shift 2 ;;
    --model) model="$2"; shift 2 ;;
    --name) name="$2"; shift 2 ;;
    --description) description="$2"; shift 2 ;;
    --vllm) vllm="$2"; shift 2 ;;
    --vllm-arg) vllm_args+=("$2"); shift 2 ;;
    --url) url="$2"; shift 2 ;;
    --served-model) served="$2"; shift 2 ;;
    --datasets) datasets="$2"; shift 2 ;;
    --methods) methods="$2"; shift 2 ;;
    --targets) targets="$2"; shift 2 ;;
    --timeout) timeout="$2"; shift 2 ;;
    --data-dir) data_dir="$2"; shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "gpu-campaign: unknown argument $1" >&2; usage ;;
  esac
done
for required in site broker key name; do
  [ -n "${!required}" ] || { echo "gpu-campaign: --$required is required" >&2; exit 1; }
done
PY="${PYTHON:-.venv/bin/python}"
if [ -n "$url" ]; then
  backbones=$("$PY" -c 'import json, sys; print(json.dumps({sys.argv[1]: {"kind": "upstream", "url": sys.argv[2], "model": sys.argv[3]}}))' \
    "$name" "$url" "${served:-$name}")
else
  [ -n "$model" ] || { echo "gpu-campaign: --model (a local checkpoint directory or GGUF file) or --url is required" >&2; exit 1; }
  [ -e "$model" ] || { echo "gpu-campaign: --model $model does not exist" >&2; exit 1; }
  model=$(cd "$(dirname "$model")" && pwd)/$(basename "$model")
  backbones=$("$PY" -c 'import json, sys; print(json.dumps({sys.argv[1]: {"kind": "vllm", "path": sys.argv[2], "served_model_name": sys.argv[1], "args": sys.argv[3:]}}))' \
    "$name" "$model" ${vllm_args[@]+"${vllm_args[@]}"})
fi

mkdir -p "$data_dir/logs"
log="$data_dir/logs/campaign-worker.log"
echo "gpu-campaign: worker log $log; backbone $name"
# The worker gets no database setting: it talks to the site over HTTP(S) and to the broker only.
env -u DATABASE_URL -u DJANGO_SETTINGS_MODULE \
  QVAL_SITE_URL="$site" CELERY_BROKER_URL="$broker" QVAL_WORKER_KEY="$key" \
  QVAL_WORKER_NAME="${QVAL_WORKER_NAME:-campaign-$name-$(hostname)}" QVAL_BACKBONES="$backbones" \
  QVAL_VLLM_EXECUTABLE="$vllm" QVAL_DATA_DIR="$data_dir" PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" \
  setsid "$PY" -m celery -A qval.remote_worker worker -Q campaign --concurrency 1 -n "campaign-$name@%h" \
    --without-gossip --without-mingle --loglevel INFO >> "$log" 2>&1 &
worker=$!
stop_worker() {
  # SIGTERM: the worker finishes nothing new, stops its vLLM server (worker_process_shutdown) and exits.
  kill -TERM -- "-$worker" 2>/dev/null || true
  for _ in $(seq 60); do kill -0 "$worker" 2>/dev/null || return 0; sleep 1; done
  kill -KILL -- "-$worker" 2>/dev/null || true
}
trap stop_worker EXIT INT TERM

status=0
"$PY" -m qval.campaign --site "$site" --key "$key" --backbone "$name" --description "$description" \
  --datasets "$datasets" --methods "$methods" --targets "$targets" --timeout "$timeout" || status=$?
exit "$status"
