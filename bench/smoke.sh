#!/usr/bin/env bash
# smoke.sh: one benchmark at a tiny size (ctest label bench), so that no bench rots unnoticed.
#   bench/smoke.sh NAME BUILD_DIR
# Runs the bench, shows its output, and fails when it exits non-zero or does not print the figures
# it exists for (each NAME's pattern below). Benches that compare with PyTorch run in the project
# venv (scripts/venv.sh) and are skipped, saying why, without it. Sizes are far too small for the
# figures to mean anything: bench/README.md has the real runs.
set -euo pipefail
want2=
name=$1 build=$(realpath "$2")
here=$(cd "$(dirname "$0")" && pwd)
venv=$here/../scripts/venv.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
case $name in
  planner) cmd=("$build/bench/bench_planner"); want='slowest run [0-9.]+ ms' ;;
  checkpoint) cmd=("$build/bench_checkpoint" 4 "$tmp/ckpt"); want='save / dd throughput +[0-9.]+x' ;;
  grad_path) cmd=("$build/bench_grad_path"); want='^2 +[0-9.]+ +[0-9.]+ +[0-9.]+x' ;;
  allreduce) cmd=(mpirun -np 2 --oversubscribe --bind-to none "$build/bench_allreduce"); want='^64 MB +[0-9.]+ +[0-9.]+ +[0-9.]+' ;;
  threads) cmd=(env STEPS=12 "$here/bench_threads.sh" "$build"); want='auto / best fixed: [0-9.]+x' ;;
  pipeline) cmd=(env STEPS=4 SIZE=tiny "$here/bench_pipeline.sh" "$build"); want='^tp=2 pp=2 m=4 +[0-9.]+ +[0-9.]+' ;;
  uneven) cmd=(env STEPS=5 ROUNDS=1 "$here/bench_uneven.sh" "$build"); want='round 1: step time 3 ranks \(11/11/10\) [0-9.]+ ms +2 ranks \(16/16\) [0-9.]+ ms +ratio 3/2 [0-9.]+x' ;;
  zero3) cmd=(env STEPS=4 ROUNDS=1 SIZE=tiny "$here/bench_zero3.sh" "$build")
         want='round 1: step time zero3 [0-9.]+ ms +zero2 [0-9.]+ ms +ratio zero3/zero2 [0-9.]+x' ;;
  reproducible) cmd=(env STEPS=4 ROUNDS=1 SIZE=tiny "$here/bench_reproducible.sh" "$build")
                want='round 1: dp=2 zero=2: step time off [0-9.]+ ms +bitwise [0-9.]+ ms +ratio bitwise/off [0-9.]+x' ;;
  estimates) cmd=(env STEPS=4 SIZE=tiny "$here/bench_estimates.sh" "$build"); want='within 10%: [0-9]+ of 9 layouts' ;;
  save_stall) cmd=(env SIZE=tiny "$here/bench_save_stall.sh" "$build"); want='async / sync: [0-9.]+x   \(target' ;;
  cli_startup) cmd=(env SIZE=tiny "$here/bench_cli_startup.sh" "$build")
               want='^gtrain --help +[0-9.]+ ms +[0-9.]+ ms +[0-9.]+x' want2='^gtrain plan 175B --gpus 4096 +[0-9.]+ ms +[0-9.]+ ms +[0-9.]+x' ;;
  restart) cmd=(env AT_STEP=50 STEPS=150 "$here/bench_restart.sh" "$build")
           want='kill: detected [0-9.]+ s after the signal, first step [0-9.]+ s after the detection' ;;
  dp) cmd=("$venv" run env STEPS=8 "$here/bench_dp.sh" "$build"); want='round 2: samples/s gtrain [0-9.]+ +pytorch-ddp [0-9.]+ +ratio [0-9.]+x' ;;
  llama) cmd=("$venv" run env SIZE=tiny STEPS=8 ROUNDS=1 THREADS=1 "$here/bench_llama.sh" "$build")
         want='round 1: step time gtrain [0-9.]+ ms +transformers eager [0-9.]+ ms +ratio transformers/gtrain [0-9.]+x' ;;
  gpu_gpt2) cmd=("$venv" run env BUILD="$build" OUT="$tmp/out" "$here/gpu_gpt2.sh" --smoke --no-record)
            want='gtrain / eager' want2='llama: gtrain / transformers eager = [0-9.]+x' ;;
  sft) cmd=("$venv" run env SIZE=tiny STEPS=4 ROUNDS=1 THREADS=1 "$here/bench_sft.sh" "$build")
       want='round 1: step time gtrain [0-9.]+ ms +transformers [0-9.]+ ms +ratio transformers/gtrain [0-9.]+x'
       want2='round 1: trained tokens/s packed [0-9]+ +padded [0-9]+ +packing gain [0-9.]+x' ;;
  lora) cmd=("$venv" run env SIZE=tiny STEPS=4 ROUNDS=1 THREADS=1 "$here/bench_lora.sh" "$build")
        want='round 1: step time gtrain [0-9.]+ ms +transformers \+ peft [0-9.]+ ms +ratio peft/gtrain [0-9.]+x'
        want2='memory: full fine-tune [0-9.]+ MiB \(planned [0-9.]+, .*\) +lora [0-9.]+ MiB \(planned [0-9.]+, .*\) +lora/full [0-9.]+x' ;;
  data_kinds) cmd=(env MB=1 STEPS=6 ROUNDS=1 "$here/bench_data_kinds.sh" "$build")
              want='^prepare \(.*\): 1 thread [0-9.]+ MB/s .* MB/s per core' want2='^step time: tokens [0-9.]+ ms +jsonl \(cache warm\) [0-9.]+ ms +ratio jsonl/tokens [0-9.]+x' ;;
  tokenizer) cmd=(env SIZE=tiny "$here/bench_tokenizer.sh" "$build")
             want='^gpt2: .*gtrain/tokenizers 1 thread: [0-9.]+x' want2='gtrain/tiktoken 1 thread: [0-9.]+x' ;;
  sweep) cmd=(env SIZE=tiny STEPS=27 "$here/bench_sweep.sh" "$build")
         want='sweep / trials alone: [0-9.]+x +pause and resume share: -?[0-9.]+%' ;;
  gpu_layouts) cmd=(env BUILD="$build" OUT="$tmp/out" STEPS=6 "$here/gpu_layouts.sh" --smoke --no-record)
               want='^layouts within tolerance: [0-9]+ of [0-9]+ ' want2='^restart_dp2: rank 1 killed at step [0-9]+, restarts recorded: [1-9]' ;;
  queue_shaping) cmd=(env SIZE=tiny ROUNDS=1 "$here/bench_queue_shaping.sh" "$build")
                 want='median queue wait: fixed-size [0-9.]+ s +backfill-shaped [0-9.]+ s +ratio fixed/shaped [0-9.]+x' ;;
  *) echo "smoke.sh: unknown bench '$name' (planner checkpoint grad_path allreduce threads pipeline uneven zero3 reproducible estimates restart gpu_layouts cli_startup dp llama gpu_gpt2 sft lora data_kinds tokenizer sweep queue_shaping)" >&2; exit 2 ;;
esac
rc=0
"${cmd[@]}" >"$tmp/out.txt" 2>&1 || rc=$?
cat "$tmp/out.txt"
if ((rc == 77)) && grep -q '^SKIPPED' "$tmp/out.txt"; then exit 77; fi
((rc == 0)) || { echo "smoke.sh: $name exited $rc"; exit 1; }
for w in "$want" ${want2:+"$want2"}; do
  grep -Eq "$w" "$tmp/out.txt" || { echo "smoke.sh: $name printed no line matching /$w/"; exit 1; }
done
echo "smoke.sh: $name ok"
