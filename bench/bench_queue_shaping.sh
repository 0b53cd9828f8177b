#!/usr/bin/env bash
# Queue shaping (issue 53): how long a gtrain stage waits in Slurm's queue at a fixed size against
# one shaped to the hole backfill can fill (--time auto). On a throw-away Slurm of its own
# (tests/slurm/slurm_harness.sh: 2 nodes x 4 fake GPUs, sched/backfill), each round replays a trace
# of other users' jobs (bench/queue_trace.txt: sleeps with long time limits) twice, from an empty
# queue each time: once with a fixed-size stage (--gpus 4 --time 01:00:00), once with a shaped one
# (--gpus 2-4 --time auto), submitted where the trace says. A stage's queue wait is Slurm's start
# time (1 s resolution) minus the submission chain.json records; the stage is cancelled once it
# starts. Prints each round's waits and the medians (target: the shaped median at most half).
# Usage: bench/bench_queue_shaping.sh [build-dir]
#   ROUNDS (default 5), SIZE full|tiny (tiny: the trace's run times / 10), TRACE (default
#   bench/queue_trace.txt), QUEUE_BENCH_PORT (default 7717; slurmd take the next two ports).
# Needs root and Debian's slurmctld, slurmd, slurm-client and munge; exits 77 (SKIPPED) without.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
BUILD=$(realpath "${1:-build}")
ROUNDS=${ROUNDS:-5}
SIZE=${SIZE:-full}
TRACE=$(realpath "${TRACE:-$here/queue_trace.txt}")
PORT=${QUEUE_BENCH_PORT:-7717}
FIXED=(--gpus 4 --time 01:00:00)
SHAPED=(--gpus 2-4 --time auto)
case $SIZE in
  full) scale=1 ;;
  tiny) scale=0.1 ;;
  *) echo "bench_queue_shaping.sh: SIZE must be full or tiny" >&2; exit 2 ;;
esac
[[ -x $BUILD/gtrain ]] || { echo "bench_queue_shaping.sh: no $BUILD/gtrain" >&2; exit 2; }
if [[ $(id -u) != 0 ]]; then
  echo "SKIPPED: the Slurm harness needs root"; exit 77
fi
for p in slurmctld slurmd munged mungekey sbatch squeue scontrol scancel; do
  if ! command -v "$p" >/dev/null; then
    echo "SKIPPED: no $p (apt-get install slurmctld slurmd slurm-client munge)"; exit 77
  fi
done
if ss -ltn 2>/dev/null | grep -Eq ":($PORT|$((PORT + 1))|$((PORT + 2)))\b"; then
  echo "bench_queue_shaping.sh: port $PORT (or the next two) is in use: another harness? set QUEUE_BENCH_PORT" >&2
  exit 1
fi

work=$(mktemp -d /tmp/gtrain-queue-bench.XXXXXX)
chmod 755 "$work"  # munged insists that every folder above its socket is o+x
export GTRAIN_SLURM_DIR=$work/slurm GTRAIN_SLURM_PORT=$PORT SLURM_CONF=$work/slurm/etc/slurm.conf
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cleanup() {
  "$here/../tests/slurm/slurm_harness.sh" stop >"$work/harness-stop.log" 2>&1 ||
    { echo "bench_queue_shaping.sh: harness stop failed:" >&2; cat "$work/harness-stop.log" >&2; }
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
if ! "$here/../tests/slurm/slurm_harness.sh" start >"$work/harness-start.log" 2>&1; then
  cat "$work/harness-start.log" >&2
  echo "bench_queue_shaping.sh: the Slurm harness did not start" >&2
  exit 1
fi

# The stage's job: a few steps of a tiny MLP (it is cancelled once it starts anyway).
cat > "$work/job.toml" <<'TOML'
[model]
name = "mlp"
hidden = [16]
[data]
kind = "synthetic"
synthetic_samples = 64
[train]
global_batch = 16
steps = 4
threads = 1
[log]
progress = "none"
TOML

# The trace, without comments: "offset nodes gpus limit run name", or "offset stage".
grep -Ev '^[[:space:]]*(#|$)' "$TRACE" > "$work/trace"
grep -Eq '^[0-9.]+[[:space:]]+stage[[:space:]]*$' "$work/trace" ||
  { echo "bench_queue_shaping.sh: $TRACE has no stage line" >&2; exit 2; }

epoch_of() { date -d "$1" +%s; }  # Slurm's local YYYY-MM-DDTHH:MM:SS
field() { tr ' ' '\n' <<<"$1" | sed -n "s/^$2=//p" | head -1; }
now() { date +%s.%N; }
elapsed_since() { awk -v a="$1" -v b="$(now)" 'BEGIN { print b - a }'; }

submit_trace_job() {  # nodes gpus limit run name
  local run
  run=$(awk -v r="$4" -v s="$scale" 'BEGIN { x = r * s; if (x < 1) x = 1; printf "%d", x + 0.5 }')
  sbatch --parsable -J "trace-$5" -N "$1" --gpus-per-node="$2" -t "$3" -o /dev/null --chdir="$work" \
    --wrap "sleep $run" >> "$work/trace-jobs"
}

# Every trace job submitted so far runs, or is held by the scheduler for a reason (not "None": not
# looked at yet) with a start backfill has planned (not "N/A").
trace_settled() {
  local ids; ids=$(cut -d';' -f1 "$work/trace-jobs" | paste -sd,)
  [[ -z $ids ]] && return 0
  ! squeue -h -j "$ids" -t PD -o '%r %S' | grep -Eq '^None |N/A$'
}

cancel_all() {
  local ids; ids=$(squeue -h -o %A | paste -sd' ')
  # shellcheck disable=SC2086
  [[ -n $ids ]] && scancel $ids
  local deadline=$((SECONDS + 60))
  while [[ -n $(squeue -h -o %A) ]]; do
    ((SECONDS < deadline)) || { echo "bench_queue_shaping.sh: jobs left after 60 s:" >&2; squeue >&2; exit 1; }
    sleep 0.2
  done
}

# One replay with one stage; prints "WAIT GPUS TIME_LIMIT SUBMIT_S TEST_SUBMISSIONS".
replay() {  # kind
  local kind=$1 args run=$work/run-$1-$round
  if [[ $kind == fixed ]]; then args=("${FIXED[@]}"); else args=("${SHAPED[@]}"); fi
  : > "$work/trace-jobs"
  local t0 lines=() i=0 shift_s=0 job="" submitted="" a b off
  mapfile -t lines < "$work/trace"
  t0=$(now)
  local deadline=$((SECONDS + 600))
  while ((SECONDS < deadline)); do
    # Submit what is due (offsets after the stage's move with it if the stage came late).
    while ((i < ${#lines[@]})); do
      read -r off rest <<<"${lines[i]}"
      [[ $(awk -v o="$off" -v s="$shift_s" -v e="$(elapsed_since "$t0")" 'BEGIN { print (o + s <= e) }') == 1 ]] || break
      if [[ $rest == stage ]]; then
        trace_settled || break
        shift_s=$(awk -v e="$(elapsed_since "$t0")" -v o="$off" 'BEGIN { print e - o }')
        a=$(now)
        (cd "$work" && "$BUILD/gtrain" submit "$work/job.toml" --run-dir "$run" "${args[@]}" --stages 1) \
          > "$work/submit-$kind-$round.log" 2>&1 ||
          { echo "--- $work/submit-$kind-$round.log:" >&2; cat "$work/submit-$kind-$round.log" >&2; echo "bench_queue_shaping.sh: gtrain submit failed" >&2; exit 1; }
        b=$(now)
        read -r job submitted < <(/usr/bin/python3 -c 'import json, sys
s = json.load(open(sys.argv[1]))["stages"][0]
print(s["job"], s["submitted"])' "$run/chain.json")
      else
        # shellcheck disable=SC2086
        submit_trace_job $rest
      fi
      i=$((i + 1))
    done
    if [[ -n $job ]]; then
      local info state start
      info=$(scontrol show job -o "$job")
      state=$(field "$info" JobState) start=$(field "$info" StartTime)
      if [[ $state != PENDING ]]; then
        scancel "$job" || true
        local gpus shape probes
        gpus=$(/usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["stages"][0]["gpus"])' "$run/chain.json")
        shape=$(field "$info" TimeLimit)
        probes=$(sed -n 's/.*--time auto: \([0-9]*\) test submission.*/\1/p' "$work/submit-$kind-$round.log" | head -1)
        cancel_all
        awk -v s="$(epoch_of "$start")" -v u="$submitted" -v g="$gpus" -v t="$shape" -v a="$a" -v b="$b" -v p="${probes:-0}" \
          'BEGIN { w = s - u; if (w < 0) w = 0; printf "%.1f %s %s %.1f %d\n", w, g, t, b - a, p }'
        return 0
      fi
    fi
    sleep 0.2
  done
  echo "bench_queue_shaping.sh: the $kind stage had not started after 600 s" >&2
  squeue >&2
  exit 1
}

n_jobs=$(grep -Evc '[[:space:]]stage[[:space:]]*$' "$work/trace")
echo "queue shaping: Slurm $(sbatch --version | awk '{print $2}') harness, 2 nodes x 4 GPUs, sched/backfill;" \
  "trace $(basename "$TRACE") ($n_jobs jobs, run times x$scale), $ROUNDS round(s)"
echo "fixed-size: gtrain submit ${FIXED[*]}   backfill-shaped: gtrain submit ${SHAPED[*]}"
: > "$work/waits"
declare -A qwait gpus limit took probes
for round in $(seq 1 "$ROUNDS"); do
  # Alternate which goes first, so neither always meets a freshly idle controller.
  if ((round % 2)); then order=(fixed shaped); else order=(shaped fixed); fi
  for kind in "${order[@]}"; do
    out=$(replay "$kind")
    read -r "qwait[$kind]" "gpus[$kind]" "limit[$kind]" "took[$kind]" "probes[$kind]" <<<"$out"
  done
  echo "round $round: queue wait fixed-size ${qwait[fixed]} s  backfill-shaped ${qwait[shaped]} s" \
    "  (shaped: ${gpus[shaped]} GPU(s) x ${limit[shaped]}; gtrain submit took ${took[fixed]} s fixed," \
    "${took[shaped]} s shaped with ${probes[shaped]} test submissions)"
  echo "${qwait[fixed]} ${qwait[shaped]}" >> "$work/waits"
done
/usr/bin/python3 - "$work/waits" <<'PY'
import statistics, sys
rows = [tuple(map(float, line.split())) for line in open(sys.argv[1])]
fixed = statistics.median(r[0] for r in rows)
shaped = statistics.median(r[1] for r in rows)
note = "" if shaped >= 1 else " (shaped median under Slurm's 1 s resolution: ratio against 1 s)"
print("median queue wait: fixed-size %.1f s  backfill-shaped %.1f s  ratio fixed/shaped %.1fx  (target >= 2x)%s"
      % (fixed, shaped, fixed / max(shaped, 1.0), note))
PY
