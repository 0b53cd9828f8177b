#!/usr/bin/env bash
# Checks (or with --fix, applies) the repository's one .clang-format on every C++ file.
# Exit 0: formatted; 1: files differ (listed); 77: no clang-format 14 here (ctest counts it skipped).
# The check pins clang-format 14 (Debian 12's): other versions break lines differently.
set -euo pipefail
cd "$(dirname "$0")/.."
FIX=0
[[ "${1:-}" == --fix ]] && FIX=1
CF=${CLANG_FORMAT:-}
if [[ -z "$CF" ]]; then
  for c in clang-format-14 clang-format; do
    if command -v "$c" >/dev/null && "$c" --version | grep -q 'version 14\.'; then CF=$c; break; fi
  done
fi
if [[ -z "$CF" ]]; then
  echo "check-format: no clang-format 14 found (Debian 12 package clang-format); not checked"
  exit 77
fi
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files -- '*.cpp' '*.h')
else
  mapfile -t files < <(find launcher runtime strategies tests bench examples \( -name '*.cpp' -o -name '*.h' \) | sort)
fi
if ((FIX)); then
  "$CF" -i --style=file "${files[@]}"
  echo "check-format: formatted ${#files[@]} files"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  "$CF" --style=file "$f" | cmp -s "$f" - || bad+=("$f")
done
if ((${#bad[@]})); then
  echo "check-format: ${#bad[@]} of ${#files[@]} files differ from .clang-format (fix: scripts/check-format.sh --fix):"
  printf '  %s\n' "${bad[@]}"
  exit 1
fi
echo "check-format: ${#files[@]} files match .clang-format"
