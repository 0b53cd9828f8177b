# bench/gpu_lib.sh: what the GPU scripts share (gpu_gpt2.sh, gpu_layouts.sh, gpu_llama.sh source
# it): a python with torch, the environment of a build packed elsewhere (bench/gpu_pack_build.sh),
# and one variant of a measured run.

# PYTHON: the given one, else the first python3 that imports torch (pyenv shims may shadow the
# system one). Exits 2, saying so, when none does.
gpu_find_python() {
  if [[ -z "${PYTHON:-}" ]]; then
    for p in python3 /usr/bin/python3; do
      if "$p" -c 'import torch' 2>/dev/null; then PYTHON=$p; break; fi
    done
  fi
  [[ -n "${PYTHON:-}" ]] || { echo "$(basename "$0"): no python3 with torch found (set PYTHON)" >&2; exit 2; }
}

# A build packed elsewhere (BUILD/BUILD_INFO; run with --no-build): its own libraries in lib/,
# torch's, NCCL's and the CUDA runtime's from $PYTHON's wheel (the torch must be the one it was
# built against), and its packed Open MPI (BUILD/mpi/env.sh) when it has one. $1: BUILD, $2: a file
# the facts are appended to. Nothing when BUILD is not packed.
gpu_use_packed_build() {
  local build=$1 facts=$2 wheel_libs here_torch wheel_dirs packed_torch
  [[ -f "$build/BUILD_INFO" ]] || return 0
  sed 's/^/packed build /' "$build/BUILD_INFO" | tee -a "$facts"
  wheel_libs=$("$PYTHON" - <<'PY'
import glob, os, torch
site = os.path.dirname(os.path.dirname(torch.__file__))
dirs = [os.path.join(os.path.dirname(torch.__file__), "lib")]
dirs += sorted({os.path.dirname(p) for p in glob.glob(os.path.join(site, "nvidia", "*", "lib", "lib*.so*"))})
print(torch.__version__, ":".join(dirs))
PY
  )
  read -r here_torch wheel_dirs <<<"$wheel_libs"
  packed_torch=$(sed -n 's/^torch: //p' "$build/BUILD_INFO")
  [[ "$packed_torch" == "$here_torch" ]] ||
    echo "warning: the packed build was made against torch $packed_torch, this python has $here_torch" | tee -a "$facts"
  # shellcheck disable=SC1091
  [[ -f "$build/mpi/env.sh" ]] && source "$build/mpi/env.sh"
  export LD_LIBRARY_PATH="$(cd "$build/lib" && pwd):$wheel_dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  if ! "$build/gtrain-worker" --version >"$(dirname "$facts")/ldd.txt" 2>&1; then
    ldd "$build/gtrain-worker" >>"$(dirname "$facts")/ldd.txt" 2>&1 || true
    echo "the packed gtrain does not start here:"
    grep -m 5 -E "not found|error" "$(dirname "$facts")/ldd.txt" || tail -5 "$(dirname "$facts")/ldd.txt"
  fi
}

# One variant of a measured gtrain run (gpu_gpt2.sh, gpu_llama.sh): $1 "NAME|KEY=VALUE" (a --set
# override) or "NAME|env:VAR=VALUE" (an environment variable); $2 the prefix of its run directory,
# which ends in the key's name; $3 the table its row goes to (name, status, metrics.jsonl); $4 the
# seconds it may take (0: skipped, the budget is spent); the rest: gtrain run's config and
# arguments. Uses BUILD and the caller's log.
gpu_variant() {
  local v=$1 prefix=$2 tsv=$3 t=$4 name override dir st setting=() env_set=()
  shift 4
  name=${v%%|*} override=${v#*|}
  if [[ $override == env:* ]]; then env_set=("${override#env:}"); else setting=(--set "$override"); fi
  dir="$prefix$(sed 's/=.*//' <<<"${override#env:}" | tr -c 'A-Za-z0-9._\n-' '_')"
  if ((t <= 0)); then
    log "variant $name: skipped (budget spent)"
    printf '%s\t%s\t%s\n' "$name" "skipped: budget spent" "$dir/metrics.jsonl" >>"$tsv"
    return 0
  fi
  log "variant $name (${env_set[*]:-${setting[*]}}, at most ${t}s)"
  if env "${env_set[@]}" timeout "$t" "$BUILD/gtrain" run "$@" --force --run-dir "$dir" --no-resume "${setting[@]}" \
      >"$dir.log" 2>&1; then
    st=ok
  else
    st="failed with exit $? (see $(basename "$dir").log)"
    tail -5 "$dir.log"
  fi
  printf '%s\t%s\t%s\n' "$name" "$st" "$dir/metrics.jsonl" >>"$tsv"
}
