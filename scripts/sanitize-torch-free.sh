#!/usr/bin/env bash
# sanitize-torch-free.sh BUILD_DIR: builds the torch-free layers (runtime/core, strategies/planner,
# the launcher's torch-free half) and their unit tests with AddressSanitizer and
# UndefinedBehaviorSanitizer, warnings as errors, and runs the tests: any leak, overflow, use after
# free or undefined behaviour fails. With GTRAIN_TORCH2_SANITIZE (address,undefined by default) the
# torch2 label's build runs the whole cpu label under them too (tests/CMakeLists.txt); this needs
# no venv.
#
# --unless-venv: exit 77 (ctest's "skipped") when the project venv is there, because then the torch2
# label's sanitized build runs the whole cpu label, these suites included, under the same sanitizers.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
if [[ ${1:-} == --unless-venv ]]; then
  shift
  if "$here/scripts/venv.sh" python >/dev/null 2>&1; then
    echo "SKIPPED: the project venv is there, so Torch2.cpu_multiproc_suites runs the whole cpu label under the sanitizers"
    exit 77
  fi
fi
build="${1:?usage: sanitize-torch-free.sh [--unless-venv] BUILD_DIR}"
generator=$(command -v ninja >/dev/null 2>&1 && echo Ninja || echo "Unix Makefiles")
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$here" -B "$build" -G "$generator" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGTRAIN_TORCH_FREE_ONLY=ON \
    -DGTRAIN_SANITIZE=address,undefined -DGTRAIN_WERROR=ON > "$build.configure.log" 2>&1 ||
    { cat "$build.configure.log"; exit 1; }
fi
cmake --build "$build" -j "$(nproc)" --target gtrain_core_tests > "$build.build.log" 2>&1 ||
  { tail -50 "$build.build.log"; exit 1; }
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:halt_on_error=1:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
exec "$build/tests/gtrain_core_tests"
