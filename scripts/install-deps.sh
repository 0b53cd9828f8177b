#!/usr/bin/env bash
# Installs the Debian 12 packages gtrain needs, only those missing. Idempotent.
# As non-root with packages missing it stops and lists them.
# Then the project's Python test venv (scripts/venv.sh ensure: torch with CUDA, transformers, ...;
# a failure there is one reported line, not fatal: what needs the venv is skipped).
#   scripts/install-deps.sh [--no-venv] [--test]
#     --no-venv: the Debian packages only (make run, make build)
#     --test:    also what only the tests need: chromium (the browser test of gtrain report),
#                slurmdbd and mariadb-server (the Slurm suite with accounting); a
#                failure there is one reported line, not fatal: that test then says SKIPPED and why
set -euo pipefail

no_venv=0
for arg in "$@"; do
  case $arg in
    --no-venv) no_venv=1 ;;
    --test) TEST_PKGS=(chromium slurmdbd mariadb-server) ;;
    *) echo "install-deps: unknown option $arg (expected --no-venv, --test)" >&2; exit 2 ;;
  esac
done

PKGS=(
  build-essential cmake make ninja-build pkg-config ccache lld clang-format
  libtorch-dev libopenblas0-pthread
  libopenmpi-dev openmpi-bin
  libcli11-dev libtomlplusplus-dev nlohmann-json3-dev libgtest-dev zlib1g-dev libzstd-dev
  libpcre2-dev libutf8proc-dev
  dataset-fashion-mnist python3-venv
  slurmctld slurmd slurm-client munge
)

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

venv() {
  if [[ $no_venv == 0 ]]; then "$(dirname "$0")/venv.sh" ensure || true; fi
}

# The test-only packages: installed when possible, never fatal.
test_pkgs() {
  local want=()
  for p in ${TEST_PKGS[@]+"${TEST_PKGS[@]}"}; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || want+=("$p")
  done
  [[ ${#want[@]} -eq 0 ]] && return 0
  if [[ "$(id -u)" != "0" ]]; then
    echo "install-deps: test packages missing: ${want[*]} (sudo apt-get install -y ${want[*]}); their tests skip" >&2
    return 0
  fi
  export DEBIAN_FRONTEND=noninteractive
  if ! { apt-get update -q && apt-get install -y -q --no-install-recommends "${want[@]}"; } > /tmp/install-deps-test.log 2>&1; then
    echo "install-deps: could not install ${want[*]} (see /tmp/install-deps-test.log); their tests skip" >&2
  fi
  return 0
}

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#PKGS[@]} packages present"
  test_pkgs
  venv
  exit 0
fi

if [[ "$(id -u)" != "0" ]]; then
  echo "install-deps: missing Debian packages: ${missing[*]}" >&2
  echo "install-deps: run as root, or: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
test_pkgs
venv
