#!/usr/bin/env bash
# The one prepared script of a GPU session (issue 54; a lent machine gives 15 minutes, one call of at
# most 10): with the build packed here (bench/gpu_pack_build.sh, carried as bench/.gpubuild) it runs
# bench/gpu_layouts.sh (every multi-rank layout on the one GPU, about 3 minutes), then
# bench/gpu_gpt2.sh --no-build with the time left (GPT-2 124M and the 1.2B llama against PyTorch
# eager and torch.compile, the gpu test suite). What comes back from the machine is at most 8 files:
# $OUT holds summary.txt (both results), RESULTS-added.md (the sections the two appended to
# bench/RESULTS.md, to apply here) and everything else in all.tgz.
#
# Usage: bench/gpu_session.sh [--smoke]   (--smoke: both scripts' CPU smoke modes with BUILD=build)
# Environment: BUILD (default bench/.gpubuild), OUT (default bench/out/gpu_session-<time>), BUDGET_S
#   (the whole session's seconds, default 540: leaves a 10-minute call room to finish), LAYOUTS_S
#   (the layouts' share, default 4/9 of it: layouts that would start past it are skipped and say so,
#   so that the speed figures keep the rest).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
cd "$ROOT"
smoke=()
[[ ${1:-} == --smoke ]] && smoke=(--smoke --no-record)
BUILD=${BUILD:-$([[ ${#smoke[@]} -gt 0 ]] && echo build || echo bench/.gpubuild)}
OUT=${OUT:-$ROOT/bench/out/gpu_session-$(date -u +%Y%m%d-%H%M%S)}
BUDGET_S=${BUDGET_S:-540}
LAYOUTS_S=${LAYOUTS_S:-$((BUDGET_S * 4 / 9))}
# The copy on a lent machine has no .git: the packed build names its commit.
[[ -n "${COMMIT:-}" || ! -f "$BUILD/BUILD_INFO" ]] || export COMMIT=$(sed -n 's/^commit: //p' "$BUILD/BUILD_INFO")
mkdir -p "$OUT"
parts=$(mktemp -d)
trap 'rm -rf "$parts"' EXIT
before=$(wc -l <"$HERE/RESULTS.md" 2>/dev/null || echo 0)
SECONDS=0
rc=0
echo "[gpu_session] layouts (BUILD=$BUILD, ${LAYOUTS_S}s)"
# The layout in flight at LAYOUTS_S may finish; the timeout stops one that hangs.
BUILD=$BUILD OUT=$parts/layouts BUDGET_S=$LAYOUTS_S timeout $((LAYOUTS_S + 60)) "$HERE/gpu_layouts.sh" "${smoke[@]}" ||
  rc=$?
left=$((BUDGET_S - SECONDS))
echo "[gpu_session] layouts exit $rc after ${SECONDS}s; gpt2 and llama with ${left}s left"
rc2=0
if ((left >= 120)); then
  build_flag=()
  [[ ${#smoke[@]} -gt 0 ]] || build_flag=(--no-build)
  BUILD=$BUILD OUT=$parts/gpt2 BUDGET_S=$left timeout "$left" "$HERE/gpu_gpt2.sh" "${build_flag[@]}" "${smoke[@]}" || rc2=$?
else
  echo "[gpu_session] gpu_gpt2.sh not run: ${left}s left"
  rc2=1
fi
{
  echo "== gpu_layouts.sh (exit $rc)"
  cat "$parts/layouts/facts.txt" "$parts/layouts/layouts.txt" 2>/dev/null || echo "(no results)"
  echo
  echo "== gpu_gpt2.sh (exit $rc2)"
  cat "$parts/gpt2/results_section.md" 2>/dev/null || echo "(no results section)"
} >"$OUT/summary.txt"
tail -n +$((before + 1)) "$HERE/RESULTS.md" >"$OUT/RESULTS-added.md" 2>/dev/null || true
tar -C "$parts" -czf "$OUT/all.tgz" .
cat "$OUT/summary.txt"
echo "[gpu_session] done in ${SECONDS}s: $(cd "$OUT" && ls | tr '\n' ' ')"
((rc == 0 && rc2 == 0))
