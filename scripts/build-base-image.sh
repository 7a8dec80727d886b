#!/usr/bin/env bash
# Build the base image of method containers offline from Debian packages:
# python3 + python3-numpy unpacked into a root filesystem (no maintainer scripts, no pip, apt or
# coreutils) and imported as one layer.
#
#   scripts/build-base-image.sh [TAG]     (default localhost/qval-base:py3-slim)
#
# Idempotent and cached: the image carries a label with a hash of its inputs (this script and the
# exact .deb files apt would download); when an image with TAG and the same hash exists, nothing is
# done. The engine is $QVAL_CONTAINER_ENGINE (podman, the default, or docker). Runs as root.
set -euo pipefail
cd "$(dirname "$0")/.."
tag=${1:-localhost/qval-base:py3-slim}
engine=${QVAL_CONTAINER_ENGINE:-podman}
export CONTAINERS_CONF=${CONTAINERS_CONF:-$PWD/containers/containers.conf}
label=org.qval.base.inputs

# Every package python3 and python3-numpy depend on, less what a filesystem of unpacked files needs
# no tool for (package management, perl, alternative BLAS builds: the reference BLAS is linked below).
[ -n "$(ls -A /var/lib/apt/lists 2>/dev/null | grep -v -e lock -e partial)" ] || apt-get update -qq
pkgs=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
         --no-replaces --no-enhances python3 python3-numpy \
       | grep -E '^[a-z0-9]' | sort -u \
       | grep -vxE 'libatlas3-base|libblis.*|libopenblas.*|perl.*|libperl.*|mailcap|mime-support|install-info|dpkg|tar|libgdbm-compat4|libdb5.3|python3-pkg-resources|debconf|base-files|libc-bin')
uris=$(apt-get download --print-uris $pkgs dash)
inputs=$( { cat "$0"; printf '%s\n' "$uris" | sort; } | sha256sum | cut -c1-32)

have=$("$engine" image inspect --format "{{index .Config.Labels \"$label\"}}" "$tag" 2>/dev/null || true)
if [ "$have" = "$inputs" ]; then
  echo "$tag is up to date ($label=$inputs)"
  exit 0
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/qval-base.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/debs" "$work/rootfs"
(cd "$work/debs" && apt-get download -q -o APT::Sandbox::User=root $pkgs dash >/dev/null)
root=$work/rootfs
for deb in "$work"/debs/*.deb; do dpkg -x "$deb" "$root"; done
arch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo "$(uname -m)-linux-gnu")
ln -sf blas/libblas.so.3 "$root/usr/lib/$arch/libblas.so.3"        # update-alternatives' job
ln -sf lapack/liblapack.so.3 "$root/usr/lib/$arch/liblapack.so.3"
ln -sf dash "$root/bin/sh"
mkdir -p "$root/tmp" "$root/input" "$root/output" "$root/proc" "$root/sys" "$root/dev"
chmod 1777 "$root/tmp"
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n' > "$root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' > "$root/etc/group"
ldconfig -r "$root"
rm -rf "$root"/usr/share/{doc,man,locale,lintian}

quiet=(); [ "$engine" = podman ] && quiet=(--quiet)
tar -C "$root" --numeric-owner -c . | "$engine" import "${quiet[@]}" \
  --change 'CMD ["python3"]' \
  --change 'ENV PYTHONDONTWRITEBYTECODE=1' \
  --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin' \
  --change "LABEL $label=$inputs" \
  - "$tag" >/dev/null
echo "built $tag ($label=$inputs, $(du -sm "$root" | cut -f1) MB)"
