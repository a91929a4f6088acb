#!/usr/bin/env bash
# Installs what the aarch64 cross build needs on Debian 12 (amd64), idempotently:
#  - the cross compiler (g++-aarch64-linux-gnu, GCC 12) and qemu-user (7.2, which emulates A64FX);
#  - the arm64 runtime libraries through multiarch (dpkg --add-architecture arm64): the emulated
#    programs load them from /usr/lib/aarch64-linux-gnu with no -L/QEMU_LD_PREFIX (passing one would
#    load a second glibc beside libc6:arm64, and the first thread created hangs);
#  - the arm64 -dev packages: those marked Multi-Arch: same beside their amd64 twins; yaml-cpp's,
#    which would replace the amd64 one, unpacked into a private prefix (MLPH_AARCH64_PREFIX, default
#    /opt/mlph-aarch64) whose CMake config points at the multiarch runtime library.
# cmake/toolchains/aarch64-linux-gnu.cmake finds all of it. Run as root (or with sudo available).
set -euo pipefail
prefix=${MLPH_AARCH64_PREFIX:-/opt/mlph-aarch64}
sudo_cmd=""; [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
export DEBIAN_FRONTEND=noninteractive

host_packages=(g++-aarch64-linux-gnu qemu-user)
arm64_packages=(libc6 libstdc++6 libgomp1 libyaml-cpp0.7
                libboost-program-options1.74-dev libboost-filesystem1.74-dev libfmt-dev zlib1g-dev libdeflate-dev libgtest-dev)
unpacked_dev=(libyaml-cpp-dev)

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  echo "== adding the arm64 architecture (multiarch)"
  $sudo_cmd dpkg --add-architecture arm64
  new_architecture=1
fi
missing=()
for p in "${host_packages[@]}"; do installed "$p" || missing+=("$p"); done
for p in "${arm64_packages[@]}"; do installed "$p:arm64" || missing+=("$p:arm64"); done
if [ ${#missing[@]} -gt 0 ] || [ -n "${new_architecture:-}" ]; then
  $sudo_cmd apt-get update -qq
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "== installing: ${missing[*]}"
  $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The unpacked -dev packages, once per version: a stamp names what is in the prefix.
stamp="$prefix/.unpacked"
want=""
for p in "${unpacked_dev[@]}"; do want+="$p=$(apt-cache policy "$p:arm64" | awk '/Candidate:/ {print $2}') "; done
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "== unpacking into $prefix: ${unpacked_dev[*]}"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  chmod 755 "$work"  # apt downloads as the _apt user
  (cd "$work" && apt-get download -qq "${unpacked_dev[@]/%/:arm64}" 2>/dev/null)
  $sudo_cmd rm -rf "$prefix"
  $sudo_cmd mkdir -p "$prefix"
  for deb in "$work"/*.deb; do $sudo_cmd dpkg -x "$deb" "$prefix"; done
  # The CMake configs name the library beside themselves; it lives in the multiarch directory.
  for lib in /usr/lib/aarch64-linux-gnu/libyaml-cpp.so.*; do
    $sudo_cmd ln -sf "$lib" "$prefix/usr/lib/aarch64-linux-gnu/"
  done
  echo "$want" | $sudo_cmd tee "$stamp" >/dev/null
fi
echo "== aarch64 cross tool chain ready: $(aarch64-linux-gnu-g++ --version | head -1); $(qemu-aarch64 --version | head -1); prefix $prefix"
