#!/usr/bin/env bash
# Build the images of docker-compose.yml without any image registry:
#
# 1. localhost/qval-debian:bookworm -- a Debian root filesystem made by debootstrap from Debian
#    packages (python3, PostgreSQL, Redis; apt for the gpu image), imported as one layer;
# 2. build/wheelhouse/ -- wheels of requirements-site.txt (pip wheel; kept in $QVAL_BUILD_CACHE);
# 3. localhost/qval-site:latest -- containers/site.Containerfile: a virtualenv installed from the
#    wheelhouse with --no-index, and the app's source (compose builds the same thing).
#
#   scripts/build-images.sh            # podman; QVAL_CONTAINER_ENGINE=docker for Docker
#
# The gpu worker's image (containers/gpu.Containerfile: the site image plus podman and runc from
# Debian, with apt) and vLLM's are built by compose for the profile gpu.
#
# Cached: the base image carries a label with the hash of its inputs (package list, suite, this
# script's base section) and the wheelhouse is kept under the hash of requirements-site.txt; both
# are rebuilt only when those change. The site image reuses the engine's layer cache, so only the
# source layer is rebuilt after a code change. Needs root (debootstrap).
set -euo pipefail
cd "$(dirname "$0")/.."
# One build at a time on this machine (parallel test workers, a second checkout): the others wait, then
# find the cache up to date.
exec 9>"${TMPDIR:-/tmp}/qval-build-images.lock"
flock 9
engine=${QVAL_CONTAINER_ENGINE:-podman}
export CONTAINERS_CONF=${CONTAINERS_CONF:-$PWD/containers/containers.conf}
suite=bookworm
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
label=org.qval.inputs
packages=python3,python3-venv,ca-certificates,postgresql,redis-server
base=localhost/qval-debian:$suite
site=localhost/qval-site:latest
PY=${PYTHON:-.venv/bin/python}

started=$(date +%s)
inputs=$(printf 'debootstrap minbase %s %s v1\n' "$suite" "$packages" | sha256sum | cut -c1-32)
have=$("$engine" image inspect --format "{{index .Config.Labels \"$label\"}}" "$base" 2>/dev/null || true)
if [ "$have" = "$inputs" ]; then
  echo "$base is up to date"
else
  command -v debootstrap >/dev/null || { echo "debootstrap is missing: scripts/install.sh installs it" >&2; exit 1; }
  work=$(mktemp -d "${TMPDIR:-/var/tmp}/qval-debian.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  debootstrap --variant=minbase --include="$packages" "$suite" "$work/root" "$mirror" > "$work/debootstrap.log" 2>&1 \
    || { tail -30 "$work/debootstrap.log" >&2; exit 1; }
  rm -rf "$work"/root/var/cache/apt/archives/*.deb "$work"/root/var/lib/apt/lists/* \
         "$work"/root/usr/share/{doc,man,locale}
  tar -C "$work/root" --numeric-owner -c . | "$engine" import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change "LABEL $label=$inputs" \
    - "$base" >/dev/null
  rm -rf "$work"; trap - EXIT
  echo "built $base"
fi

# The wheelhouse is kept between runs (and checkouts) in $QVAL_BUILD_CACHE, keyed by the hash of
# requirements-site.txt, and hard-linked into build/wheelhouse, the build context's copy.
cache=${QVAL_BUILD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/qval/build}
kept="$cache/wheelhouse-$(sha256sum requirements-site.txt | cut -c1-16)"
if [ -f "$kept/.complete" ]; then
  echo "wheelhouse $kept is up to date"
else
  rm -rf "$kept"; mkdir -p "$kept"
  "$PY" -m pip wheel -q --disable-pip-version-check -r requirements-site.txt -w "$kept"
  touch "$kept/.complete"
  echo "built $kept ($(ls "$kept" | wc -l) wheels)"
fi
rm -rf build/wheelhouse; mkdir -p build
cp -al "$kept" build/wheelhouse 2>/dev/null || cp -a "$kept" build/wheelhouse

quiet=(); [ "$engine" = podman ] && quiet=(--pull=never)
"$engine" build "${quiet[@]}" -q -f containers/site.Containerfile -t "$site" . >/dev/null
echo "built $site in $(( $(date +%s) - started )) s"
