#!/usr/bin/env bash
# Build the image the TerminalBench environment (qval/envs/terminal.py) runs its shell commands in,
# offline from Debian packages like scripts/build-base-image.sh: bash, coreutils, findutils, grep,
# sed, awk (mawk), diffutils, tar, gzip, git, procps and python3 unpacked into a root filesystem
# (no maintainer scripts, no apt, no perl) and imported as one layer.
#
#   scripts/build-terminal-image.sh [TAG]     (default localhost/qval-terminal:bookworm)
#
# Idempotent and cached: the image carries a label with a hash of its inputs (this script and the
# exact .deb files apt would download); when an image with TAG and the same hash exists, nothing is
# done. The engine is $QVAL_CONTAINER_ENGINE (podman, the default, or docker). Runs as root.
set -euo pipefail
cd "$(dirname "$0")/.."
tag=${1:-localhost/qval-terminal:bookworm}
engine=${QVAL_CONTAINER_ENGINE:-podman}
export CONTAINERS_CONF=${CONTAINERS_CONF:-$PWD/containers/containers.conf}
label=org.qval.terminal.inputs

wanted="bash coreutils findutils grep sed mawk diffutils tar gzip git procps python3 dash"
# Their dependencies, less what unpacked files need no tool for (package management, perl: git's
# porcelain written in perl is not used, other awks, the usr-merge converters).
[ -n "$(ls -A /var/lib/apt/lists 2>/dev/null | grep -v -e lock -e partial)" ] || apt-get update -qq
deps=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
         --no-replaces --no-enhances $wanted \
       | grep -E '^[a-z0-9]' | sort -u \
       | grep -vxE 'perl.*|libperl.*|lib.*-perl|git-man|gawk|original-awk|mailcap|mime-support|install-info|dpkg|debconf|base-files|libc-bin|usrmerge|usr-is-merged|init-system-helpers|libgdbm-compat4|libdb5.3')
pkgs=$(printf '%s\n' $wanted $deps | sort -u)
uris=$(apt-get download --print-uris $pkgs)
inputs=$( { cat "$0"; printf '%s\n' "$uris" | sort; } | sha256sum | cut -c1-32)

have=$("$engine" image inspect --format "{{index .Config.Labels \"$label\"}}" "$tag" 2>/dev/null || true)
if [ "$have" = "$inputs" ]; then
  echo "$tag is up to date ($label=$inputs)"
  exit 0
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/qval-terminal.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/debs" "$work/rootfs"
(cd "$work/debs" && apt-get download -q -o APT::Sandbox::User=root $pkgs >/dev/null)
root=$work/rootfs
for deb in "$work"/debs/*.deb; do dpkg -x "$deb" "$root"; done
ln -sf dash "$root/bin/sh"                                         # update-alternatives' job
ln -sf mawk "$root/usr/bin/awk"
mkdir -p "$root/tmp" "$root/app" "$root/proc" "$root/sys" "$root/dev"
chmod 1777 "$root/tmp"
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/app:/bin/bash\n' > "$root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' > "$root/etc/group"
ldconfig -r "$root"
rm -rf "$root"/usr/share/{doc,man,locale,lintian,info}
rm -rf "$root"/usr/share/git-core/templates/hooks                 # sample hooks: 60 KB in every new repository

quiet=(); [ "$engine" = podman ] && quiet=(--quiet)
tar -C "$root" --numeric-owner -c . | "$engine" import "${quiet[@]}" \
  --change 'CMD ["bash"]' \
  --change 'ENV PYTHONDONTWRITEBYTECODE=1' \
  --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change "LABEL $label=$inputs" \
  - "$tag" >/dev/null
echo "built $tag ($label=$inputs, $(du -sm "$root" | cut -f1) MB)"
