#!/usr/bin/env bash
# test-torch2.sh: builds gtrain against LibTorch 2.x and runs its cpu and multiproc tests there.
#
# Debian 12 ships LibTorch 1.13; Debian trixie ships 2.6 (built with gcc 14), Debian sid 2.14 (gcc
# 16, C++20). This script makes a chroot of that suite with debootstrap (Debian's packages only),
# installs the build dependencies in it, clones the committed HEAD of this repository into it,
# builds, and runs ctest -L 'cpu|multiproc'.
# Needs root. About half an hour on 2 cores the first time, so it is a tool for changes to
# torch-facing code, not a CI step (CI builds and tests against pip's LibTorch 2.11, label torch2, and
# compiles against sid's 2.14 headers with scripts/compile-check-torch2.sh, label compat).
#
#   scripts/test-torch2.sh [CHROOT_DIR]      (default: /var/tmp/gtrain-$SUITE)
#
# SUITE: trixie (default, LibTorch 2.6) or sid (whatever LibTorch Debian unstable has now).
# Re-running reuses the chroot and the build tree (only changed files recompile). The ctest log is
# CHROOT_DIR/src/ctest.log. Environment: CTEST_ARGS, extra arguments for ctest (e.g. -R Memory).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
suite=${SUITE:-trixie}
[[ $suite == trixie || $suite == sid ]] || { echo "test-torch2: SUITE must be trixie or sid, got '$suite'" >&2; exit 2; }
root=${1:-/var/tmp/gtrain-$suite}
[[ $(id -u) -eq 0 ]] || { echo "test-torch2: needs root (debootstrap, chroot)" >&2; exit 2; }

if [[ ! -x $root/usr/bin/apt-get ]]; then
  command -v debootstrap >/dev/null || apt-get install -y -qq debootstrap
  echo "test-torch2: debootstrap $suite into $root"
  debootstrap --variant=minbase --include=ca-certificates "$suite" "$root" http://deb.debian.org/debian >/dev/null
fi

mounted=()
cleanup() { for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount "${mounted[$i]}" 2>/dev/null || true; done; }
trap cleanup EXIT
bind() {  # bind-mount $1 at the same place inside the chroot, once
  mkdir -p "$root$1"
  if ! mountpoint -q "$root$1"; then mount --bind "$1" "$root$1" && mounted+=("$root$1"); fi
}
mountpoint -q "$root/proc" || { mount -t proc proc "$root/proc" && mounted+=("$root/proc"); }
bind /dev; bind /dev/pts; bind /dev/shm
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true

chroot "$root" /bin/bash -c 'set -e; export DEBIAN_FRONTEND=noninteractive
  if ! dpkg -s libtorch-dev libpcre2-dev libutf8proc-dev >/dev/null 2>&1; then
    # A mirror snapshot'"'"'s sid Release may be past its Valid-Until date; signatures are still checked.
    echo "Acquire::Check-Valid-Until \"false\";" > /etc/apt/apt.conf.d/99gtrain-snapshot
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends libtorch-dev libopenmpi-dev openmpi-bin libcli11-dev \
      libtomlplusplus-dev libgtest-dev nlohmann-json3-dev libpcre2-dev libutf8proc-dev libopenblas0-pthread \
      pkg-config cmake ninja-build g++ lld \
      ccache make python3 procps >/dev/null
  fi
  echo "test-torch2: $(dpkg-query -W -f="LibTorch \${Version}" libtorch-dev), $(g++ --version | head -1)"'

# The committed HEAD, as CI would see it.
mkdir -p "$root/src"
if [[ -d $root/src/gtrain/.git ]]; then
  git -C "$root/src/gtrain" fetch -q "$here" HEAD && git -C "$root/src/gtrain" reset -q --hard FETCH_HEAD
else
  git clone -q "$here" "$root/src/gtrain"
fi
echo "test-torch2: testing $(git -C "$root/src/gtrain" log --oneline -1)"

export CTEST_ARGS=${CTEST_ARGS:-}  # word-split inside the chroot, never parsed as shell
chroot "$root" /bin/bash -c "set -e; cd /src/gtrain
  [[ -f build/CMakeCache.txt ]] || cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/src/configure.log
  cmake --build build -j \$(nproc) >/src/build.log 2>&1 || { tail -30 /src/build.log; exit 1; }
  cd build
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  ctest -L '^(cpu|multiproc)\$' --output-on-failure --timeout 900 \${CTEST_ARGS:-} >/src/ctest.log 2>&1 && rc=0 || rc=\$?
  grep -E 'tests passed|tests failed|\\*\\*\\*Failed|Timeout' /src/ctest.log || true
  exit \$rc"
