#!/usr/bin/env bash
# venv.sh: the project's Python test environment, built once per machine from PyPI.
#
# The venv holds the pinned versions of scripts/venv-requirements.txt (torch with CUDA,
# transformers, safetensors, tensorboard, numpy): what the torch2 build links against and what the
# Python-peer tests import. It lives outside the clone, keyed by a hash of the requirements and the
# base interpreter, so every clone on a machine shares one copy and a change of pins builds a new one:
#   ${GTRAIN_CACHE:-~/.cache/gtrain}/venv-<hash>/   (the downloaded wheels: .../wheels/)
#
#   scripts/venv.sh ensure   create it unless it is complete (a second run costs nothing); on
#                            failure print one line, record why, exit 1
#   scripts/venv.sh path     print the venv's folder (whether or not it exists yet)
#   scripts/venv.sh python   print its python when complete; else print "SKIPPED: <why>", exit 77
#   scripts/venv.sh run CMD  run CMD with the venv's bin/ first on PATH; when the venv is not
#                            complete print "SKIPPED: <why>" and exit 77 (ctest: skipped)
# Environment: GTRAIN_CACHE, GTRAIN_PYTHON_BASE (default /usr/bin/python3, Debian's), and pip's
# own settings (index, proxy, certificates) as the machine has them configured.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
req=$here/venv-requirements.txt
cache=${GTRAIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gtrain}
base=${GTRAIN_PYTHON_BASE:-/usr/bin/python3}
[[ -x $base ]] || base=$(command -v python3 || echo /usr/bin/python3)

key() {
  { cat "$req"; "$base" -c 'import sys; print(sys.version)' 2>/dev/null || echo "$base"; } | sha256sum | cut -c1-12
}
venv=$cache/venv-$(key)
why_file=$venv.unavailable

complete() { [[ -f $venv/.complete && -x $venv/bin/python ]]; }
why_not() {
  if [[ -f $why_file ]]; then cat "$why_file"; else echo "the project venv $venv was never created (run scripts/venv.sh ensure, or make test)"; fi
}

ensure() {
  if complete; then
    echo "venv: $venv ready ($(cat "$venv/.complete"))"
    return 0
  fi
  mkdir -p "$cache"
  exec 9>"$venv.lock"
  flock 9  # one builder per machine; the others wait and then find it complete
  if complete; then echo "venv: $venv ready ($(cat "$venv/.complete"))"; return 0; fi
  # Built in place (a venv's scripts name their folder); .complete is written last, so a build
  # that was cut short is started again from nothing.
  local t0=$SECONDS log=$venv.log
  rm -rf "$venv" "$why_file"
  echo "venv: creating $venv from $(basename "$req") (several GB the first time on a machine; log: $log)"
  fail() {
    echo "$1" >"$why_file"
    echo "venv: $1" >&2
    rm -rf "$venv"
  }
  if ! "$base" -m venv "$venv" >"$log" 2>&1; then
    fail "cannot create a venv with $base -m venv (apt-get install python3-venv; see $log)"
    return 1
  fi
  # The registry first: one small download tells an unreachable index from a failed install.
  if ! "$venv/bin/python" -m pip download --no-deps --no-cache-dir -q --timeout 20 --retries 1 -d "$venv/probe" mpmath==1.3.0 >>"$log" 2>&1; then
    fail "the Python package index is not reachable (pip download failed; see $log): tests that need the venv are skipped"
    return 1
  fi
  rm -rf "$venv/probe"
  # Wheels go to a folder shared by every venv of this machine, so a change of pins downloads only
  # what changed; the venv then installs from that folder alone.
  if ! PIP_CACHE_DIR=$cache/pip "$venv/bin/python" -m pip download -q --no-input -d "$cache/wheels" -r "$req" >>"$log" 2>&1; then
    fail "pip download -r $(basename "$req") failed (see $log): tests that need the venv are skipped"
    return 1
  fi
  if ! "$venv/bin/python" -m pip install -q --no-input --no-index --find-links "$cache/wheels" -r "$req" >>"$log" 2>&1; then
    fail "pip install -r $(basename "$req") from $cache/wheels failed (see $log): tests that need the venv are skipped"
    return 1
  fi
  local versions
  if ! versions=$("$venv/bin/python" -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__)' 2>>"$log"); then
    fail "the new venv cannot import torch and transformers (see $log)"
    return 1
  fi
  echo "$versions; built in $((SECONDS - t0)) s on $(date -u +%F)" >"$venv/.complete"
  echo "venv: $venv ready ($(cat "$venv/.complete"))"
}

case ${1:-} in
  ensure) ensure ;;
  path) echo "$venv" ;;
  python)
    if complete; then echo "$venv/bin/python"; else echo "SKIPPED: $(why_not)"; exit 77; fi ;;
  run)
    shift
    [[ $# -gt 0 ]] || { echo "venv.sh run: no command given" >&2; exit 2; }
    if ! complete; then echo "SKIPPED: $(why_not)"; exit 77; fi
    export PATH=$venv/bin:$PATH VIRTUAL_ENV=$venv
    exec "$@" ;;
  *) echo "usage: scripts/venv.sh ensure|path|python|run CMD..." >&2; exit 2 ;;
esac
