# Sourced by scripts/build-base-image.sh and scripts/build-terminal-image.sh: an image built offline from
# Debian packages, unpacked into a root filesystem (no maintainer scripts, no apt) and imported as one layer,
# cached by a label holding a hash of its inputs (the building script, this file and the exact .deb files
# apt would download). The caller sets: engine, tag, label; then calls, in order,
#   rootfs_packages WANTED... -- EXCLUDED_REGEX   (prints WANTED and their dependencies, less the excluded)
#   rootfs_up_to_date SCRIPT PACKAGES             (sets inputs; true when TAG already has them: stop there)
#   rootfs_unpack PACKAGES                        (sets work and root: the unpacked filesystem)
#   rootfs_users HOME_OF_NOBODY SHELL_OF_NOBODY   (/etc/passwd and /etc/group: root and nobody)
#   rootfs_import CHANGE...                       (imports root as TAG with the label, prints what was built)
export CONTAINERS_CONF=${CONTAINERS_CONF:-$PWD/containers/containers.conf}
ROOTFS_LIB=${BASH_SOURCE[0]}

rootfs_packages() {
  local wanted=() excluded
  while [ "$1" != "--" ]; do wanted+=("$1"); shift; done
  excluded=$2
  [ -n "$(ls -A /var/lib/apt/lists 2>/dev/null | grep -v -e lock -e partial)" ] || apt-get update -qq
  { printf '%s\n' "${wanted[@]}"
    apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
      --no-replaces --no-enhances "${wanted[@]}" | grep -E '^[a-z0-9]' | grep -vxE "$excluded"
  } | sort -u
}

rootfs_up_to_date() {
  local script=$1 pkgs=$2 uris have
  uris=$(apt-get download --print-uris $pkgs)
  inputs=$( { cat "$script" "$ROOTFS_LIB"; printf '%s\n' "$uris" | sort; } | sha256sum | cut -c1-32)
  have=$("$engine" image inspect --format "{{index .Config.Labels \"$label\"}}" "$tag" 2>/dev/null || true)
  if [ "$have" = "$inputs" ]; then
    echo "$tag is up to date ($label=$inputs)"
    return 0
  fi
  return 1
}

rootfs_unpack() {
  local pkgs=$1 deb
  work=$(mktemp -d "${TMPDIR:-/tmp}/qval-rootfs.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  mkdir -p "$work/debs" "$work/rootfs"
  (cd "$work/debs" && apt-get download -q -o APT::Sandbox::User=root $pkgs >/dev/null)
  root=$work/rootfs
  for deb in "$work"/debs/*.deb; do dpkg -x "$deb" "$root"; done
  ln -sf dash "$root/bin/sh"                                     # update-alternatives' job
  mkdir -p "$root/tmp" "$root/proc" "$root/sys" "$root/dev"
  chmod 1777 "$root/tmp"
}

rootfs_users() {
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:%s:%s\n' "$1" "$2" > "$root/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' > "$root/etc/group"
}

rootfs_import() {
  local changes=() change quiet=()
  for change in "$@"; do changes+=(--change "$change"); done
  ldconfig -r "$root"
  rm -rf "$root"/usr/share/{doc,man,locale,lintian,info}
  [ "$engine" = podman ] && quiet=(--quiet)
  tar -C "$root" --numeric-owner -c . | "$engine" import "${quiet[@]}" "${changes[@]}" \
    --change 'ENV PYTHONDONTWRITEBYTECODE=1' \
    --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin' \
    --change "LABEL $label=$inputs" \
    - "$tag" >/dev/null
  echo "built $tag ($label=$inputs, $(du -sm "$root" | cut -f1) MB)"
}
