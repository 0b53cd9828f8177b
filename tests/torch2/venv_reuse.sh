#!/usr/bin/env bash
# venv_reuse.sh: a complete project venv costs nothing the second time, and every clone on the
# machine finds the same one (its folder depends on the pins and the interpreter, not the clone).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
venv=$root/scripts/venv.sh
py=$("$venv" python) || { echo "$py"; exit 77; }
fail=0
t0=$(date +%s%N)
out=$("$venv" ensure)
ms=$((($(date +%s%N) - t0) / 1000000))
echo "$out (${ms} ms)"
[[ $out == *" ready ("* ]] || { echo "FAIL: ensure did not report the venv ready"; fail=1; }
((ms < 2000)) || { echo "FAIL: a second ensure took ${ms} ms"; fail=1; }
# Another clone: the same two files somewhere else name the same venv.
other=$(mktemp -d)
trap 'rm -rf "$other"' EXIT
mkdir -p "$other/scripts" && cp "$root/scripts/venv.sh" "$root/scripts/venv-requirements.txt" "$other/scripts/"
[[ $("$other/scripts/venv.sh" path) == "$("$venv" path)" ]] || { echo "FAIL: another clone names another venv"; fail=1; }
# A change of pins names another venv (and so never runs against stale packages).
echo "six==1.16.0" >>"$other/scripts/venv-requirements.txt"
[[ $("$other/scripts/venv.sh" path) != "$("$venv" path)" ]] || { echo "FAIL: changed pins name the same venv"; fail=1; }
((fail)) || echo "ok: reused in ${ms} ms, shared by clones, keyed by the pins"
exit $fail
