#!/usr/bin/env bash
# Proves the README's set-up as a new user meets it: a bare Debian 12 (debootstrap minbase), root,
# a clean clone of this checkout's HEAD, nothing else; then `tools/setup.sh MODE` inside it, or with
# `ci` the whole of .ci/run (the README's test command, the package check, aarch64, the fuzzers).
#   tools/ci/fresh-debian.sh [run|test|ci]   (as root; FRESH_ROOT=/tmp/mlph-fresh by default)
# Slow (a whole Debian install and build): run by hand before a release, not in CI, which runs
# tools/ci/check-setup-packages.py instead. ../shared, when present, is copied beside the clone.
set -euo pipefail
mode=${1:-test}
root=${FRESH_ROOT:-/tmp/mlph-fresh}
src=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)

command -v debootstrap >/dev/null || apt-get install -y -qq debootstrap >/dev/null
if [ ! -x "$root/usr/bin/apt-get" ]; then
  echo "== debootstrap minbase bookworm into $root"
  debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian >"$root.debootstrap.log" 2>&1 \
    || { tail -n 20 "$root.debootstrap.log"; exit 1; }
fi

mounts=(proc sys dev dev/shm)
# Recursive unmounts: /sys and /dev are rbind mounts with mounts below them, which a plain umount
# leaves in place, and a later `rm -rf` of the root would then delete the host's /dev.
cleanup() {
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do
    ! mountpoint -q "$root/${mounts[i]}" || umount -R "$root/${mounts[i]}" || umount -R -l "$root/${mounts[i]}"
  done
}
trap cleanup EXIT
mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys" && mount --make-rslave "$root/sys"  # (rslave: unmounting them later
mount --rbind /dev "$root/dev" && mount --make-rslave "$root/dev"  # does not reach the host's)
mount -t tmpfs shm "$root/dev/shm"

rm -rf "$root/work" && mkdir -p "$root/work"
git clone --quiet "$src" "$root/work/main"
[ -d "$src/../shared" ] && cp -r "$src/../shared" "$root/work/shared"
case $mode in
  run | test) command="tools/setup.sh $mode" ;;
  ci) command=".ci/run" ;;
  *) echo "usage: tools/ci/fresh-debian.sh [run|test|ci]" >&2; exit 2 ;;
esac
echo "== $command in the fresh Debian ($(git -C "$root/work/main" log --oneline -1))"
chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin \
  /bin/bash -c "cd /work/main && $command"
