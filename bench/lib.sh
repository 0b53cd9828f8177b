# bench/lib.sh: what the benches share (bench_llama.sh, bench_lora.sh, bench_sft.sh, bench_restart.sh
# and gpu_layouts.sh source it): the check for their Python peer, a work folder removed on exit, a
# rank's heartbeat, and the job's [model], [optimizer], [train], [checkpoint] and [log] tables for
# the llama they time (L H KV C I T B STEPS THREADS set).

# Exits 77 (ctest: skipped), saying why, unless $PYTHON imports these modules ("peft, transformers").
bench_need_python() {
  PYTHON=${PYTHON:-python3}
  if ! "$PYTHON" -c "import $1" 2>/dev/null; then
    echo "SKIPPED: $PYTHON has no ${1//, / or } (run in the project venv: scripts/venv.sh run $0)"
    exit 77
  fi
}

# work: a fresh folder, removed when the bench exits.
bench_work() {
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
}

# "STEP PID" from rank $2's heartbeat in run directory $1 ("0 0" before it writes one).
bench_heartbeat() {
  /usr/bin/python3 - "$1/.heartbeat/rank-$2.json" <<'PY' 2>/dev/null || echo "0 0"
import json, sys
j = json.load(open(sys.argv[1]))
print(j["step"], j["pid"])
PY
}

# The [model] table of vocabulary $1; with $2 = rope, Llama 3's rotary settings (theta 500000, llama3 scaling).
bench_llama_model() {
  cat <<TOML
[model]
name = "llama"
n_layer = $L
n_head = $H
n_kv_head = $KV
n_embd = $C
intermediate_size = $I
seq_len = $T
vocab = $1
tied_embeddings = false
TOML
  if [[ ${2:-} == rope ]]; then
    printf 'rope_theta = 500000.0\nrope_scaling = "llama3"\n'
  fi
}

# The [optimizer] to [log] tables (AdamW as the references run it; no save at the end); $1: more
# [train] lines, $2: more [log] lines.
bench_train_tables() {
  cat <<TOML
[optimizer]
learning_rate = 1e-3
beta2 = 0.95
weight_decay = 0.1
[train]
global_batch = $B
steps = $STEPS
threads = $THREADS
${1:-}
[checkpoint]
at_end = false
[log]
progress = "none"
${2:-}
TOML
}
