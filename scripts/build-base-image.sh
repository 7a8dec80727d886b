#!/usr/bin/env bash
# Build the base image of method containers offline from Debian packages (scripts/lib/debian-rootfs.sh):
# python3 + python3-numpy unpacked into a root filesystem (no maintainer scripts, no pip, apt or
# coreutils) and imported as one layer.
#
#   scripts/build-base-image.sh [TAG]     (default localhost/qval-base:py3-slim)
#
# Idempotent and cached by a label with a hash of its inputs. The engine is $QVAL_CONTAINER_ENGINE
# (podman, the default, or docker). Runs as root.
set -euo pipefail
cd "$(dirname "$0")/.."
# One build at a time on this machine (parallel test workers, a second checkout): the others wait, then
# find the cache up to date.
exec 9>"${TMPDIR:-/tmp}/qval-build-base-image.lock"
flock 9
source scripts/lib/debian-rootfs.sh
tag=${1:-localhost/qval-base:py3-slim}
engine=${QVAL_CONTAINER_ENGINE:-podman}
label=org.qval.base.inputs

# Every package python3 and python3-numpy depend on, less what a filesystem of unpacked files needs
# no tool for (package management, perl, alternative BLAS builds: the reference BLAS is linked below).
pkgs="$(rootfs_packages python3 python3-numpy -- \
  'libatlas3-base|libblis.*|libopenblas.*|perl.*|libperl.*|mailcap|mime-support|install-info|dpkg|tar|libgdbm-compat4|libdb5.3|python3-pkg-resources|debconf|base-files|libc-bin') dash"
rootfs_up_to_date "$0" "$pkgs" && exit 0
rootfs_unpack "$pkgs"
arch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo "$(uname -m)-linux-gnu")
ln -sf blas/libblas.so.3 "$root/usr/lib/$arch/libblas.so.3"        # update-alternatives' job
ln -sf lapack/liblapack.so.3 "$root/usr/lib/$arch/liblapack.so.3"
mkdir -p "$root/input" "$root/output"
rootfs_users /nonexistent /usr/sbin/nologin
rootfs_import 'CMD ["python3"]'
