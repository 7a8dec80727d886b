#!/usr/bin/env bash
# Build the image the TerminalBench environment (qval/envs/terminalbench/adapter.py) runs its shell commands in,
# offline from Debian packages (scripts/lib/debian-rootfs.sh): bash, coreutils, findutils, grep, sed,
# awk (mawk), diffutils, tar, gzip, git, procps and python3 unpacked into a root filesystem (no
# maintainer scripts, no apt, no perl) and imported as one layer.
#
#   scripts/build-terminal-image.sh [TAG]     (default localhost/qval-terminal:bookworm)
#
# Idempotent and cached by a label with a hash of its inputs. The engine is $QVAL_CONTAINER_ENGINE
# (podman, the default, or docker). Runs as root.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/debian-rootfs.sh
tag=${1:-localhost/qval-terminal:bookworm}
engine=${QVAL_CONTAINER_ENGINE:-podman}
label=org.qval.terminal.inputs

# The tools and their dependencies, less what unpacked files need no tool for (package management, perl:
# git's porcelain written in perl is not used, other awks, the usr-merge converters).
pkgs=$(rootfs_packages bash coreutils findutils grep sed mawk diffutils tar gzip git procps python3 dash -- \
  'perl.*|libperl.*|lib.*-perl|git-man|gawk|original-awk|mailcap|mime-support|install-info|dpkg|debconf|base-files|libc-bin|usrmerge|usr-is-merged|init-system-helpers|libgdbm-compat4|libdb5.3')
rootfs_up_to_date "$0" "$pkgs" && exit 0
rootfs_unpack "$pkgs"
ln -sf mawk "$root/usr/bin/awk"
mkdir -p "$root/app"
rootfs_users /app /bin/bash
rm -rf "$root"/usr/share/git-core/templates/hooks                 # sample hooks: 60 KB in every new repository
rootfs_import 'CMD ["bash"]' 'ENV LANG=C.UTF-8'
