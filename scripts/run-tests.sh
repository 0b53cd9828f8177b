#!/usr/bin/env bash
# Runs ctest with every label this machine can run: cpu always; multiproc when the build has MPI
# and mpirun exists; slurm when Slurm's daemons are installed; gpu when a GPU is visible; compat
# (the LibTorch 2.x compile check) when the build registered it, i.e. CUDA headers are here.
set -euo pipefail
BUILD=${1:-build}
labels="cpu"
if grep -q "GTRAIN_HAVE_MPI:INTERNAL=ON" "$BUILD/CMakeCache.txt" 2>/dev/null && command -v mpirun >/dev/null; then
  labels="$labels|multiproc"
fi
if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null; then
  labels="$labels|slurm"
fi
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  labels="$labels|gpu"
fi
if grep -q "^GTRAIN_CUDA_INCLUDE_DIR:PATH=/" "$BUILD/CMakeCache.txt" 2>/dev/null; then
  labels="$labels|compat"
fi
echo "run-tests: labels $labels"
cd "$BUILD"
exec ctest -L "^($labels)\$" --output-on-failure --timeout 900 -j "${CTEST_JOBS:-1}"
