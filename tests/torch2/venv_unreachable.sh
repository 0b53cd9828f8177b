#!/usr/bin/env bash
# venv_unreachable.sh: without a reachable package index, scripts/venv.sh ensure fails with one line
# that says so, and what needs the venv (venv.sh run, build-torch2.sh) is skipped (exit 77) with that
# reason; nothing is left half-built. Uses a cache folder of its own and an index on a closed port.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export GTRAIN_CACHE=$tmp/cache PIP_INDEX_URL=http://127.0.0.1:9/simple PIP_FIND_LINKS=$tmp/no-wheels PIP_RETRIES=0 PIP_TIMEOUT=3
mkdir -p "$tmp/no-wheels"
fail=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi; }

rc=0
"$root/scripts/venv.sh" ensure >"$tmp/out" 2>"$tmp/err" || rc=$?
cat "$tmp/out" "$tmp/err"
check "ensure exits 1 (got $rc)" '((rc == 1))'
check "ensure prints one line on stderr" '[[ $(wc -l <"$tmp/err") -eq 1 ]]'
check "that line says the index is not reachable" 'grep -q "package index is not reachable" "$tmp/err"'
venv=$("$root/scripts/venv.sh" path)
check "no half-built venv is left ($venv)" '[[ ! -e $venv ]]'

rc=0
"$root/scripts/venv.sh" run python3 -c 'print(1)' >"$tmp/run" 2>&1 || rc=$?
cat "$tmp/run"
check "venv.sh run exits 77 (got $rc)" '((rc == 77))'
check "and says SKIPPED with the reason" 'grep -q "^SKIPPED: the Python package index is not reachable" "$tmp/run"'

rc=0
"$root/scripts/build-torch2.sh" "$tmp/build" >"$tmp/build.out" 2>&1 || rc=$?
cat "$tmp/build.out"
check "build-torch2.sh exits 77 (got $rc)" '((rc == 77))'
check "and says SKIPPED with the reason" 'grep -q "^SKIPPED: the Python package index is not reachable" "$tmp/build.out"'
check "and configures nothing" '[[ ! -e $tmp/build ]]'
exit $fail
