#!/usr/bin/env bash
# check_layers_selftest.sh: scripts/check-layers.py fails on each kind of upward include it guards
# (a layer above, a launcher folder above, LibTorch in a torch-free layer) and passes a clean tree.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
mkdir -p "$tree"/runtime/core "$tree"/runtime/train "$tree"/launcher/base "$tree"/launcher/cli "$tree"/strategies
echo '#include "runtime/core/errors.h"' >"$tree"/runtime/train/trainer.cpp
echo '#include "launcher/base/text_util.h"' >"$tree"/launcher/cli/cli.cpp
echo '#include "launcher/cli/cli.h"' >"$tree"/launcher/main.cpp
/usr/bin/python3 "$src"/scripts/check-layers.py "$tree" >/dev/null || { echo "FAIL: a clean tree is refused"; exit 1; }

expect_refused() {  # FILE LINE PATTERN: with LINE in FILE, check-layers exits 1 and prints PATTERN
  mkdir -p "$(dirname "$tree/$1")"
  echo "$2" >"$tree/$1"
  if out=$(/usr/bin/python3 "$src"/scripts/check-layers.py "$tree"); then
    echo "FAIL: $1 with '$2' passed"; exit 1
  fi
  grep -q -- "$3" <<<"$out" || { echo "FAIL: $1: expected '$3' in: $out"; exit 1; }
  rm "$tree/$1"
}
expect_refused runtime/core/bad.h '#include "runtime/train/trainer.h"' 'core (layer 0) includes runtime/train/trainer.h'
expect_refused runtime/core/bad.cpp '#include <torch/torch.h>' 'core is torch-free but includes'
expect_refused launcher/base/bad.cpp '#include "launcher/cli/cli.h"' 'launcher/base/ includes launcher/cli/cli.h from launcher/cli/, a folder above it'
expect_refused launcher/misc/bad.cpp '#include "launcher/base/text_util.h"' 'launcher/misc/ is not one of'
echo "check-layers refuses each upward include and passes a clean tree"
