// batch_script.cpp: shell_quote and the scheduler-independent body of every stage's batch script.
#include "launcher/scheduler/batch_script.h"

#include <sstream>

#include "launcher/scheduler/scheduler_backend.h"

namespace gtrain {

std::string shell_quote(const std::string& s) {
  // Single quotes keep everything literal; a single quote itself becomes '\''.
  if (!s.empty() && s.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_@%+=:,./-") ==
                        std::string::npos)
    return s;
  std::string out = "'";
  for (char c : s) {
    if (c == '\'')
      out += "'\\''";
    else
      out += c;
  }
  return out + "'";
}

namespace {

// The scheduler-independent body: variables, signal forwarding, the run, the exit-code report.
std::string script_body(const BatchStage& s, const std::string& scheduler, const std::string& job_id_var) {
  std::ostringstream b;
  b << "set -u\n"
    << "GTRAIN=" << shell_quote(s.gtrain) << "\n"
    << "CONFIG=" << shell_quote(s.config) << "\n"
    << "RUN_DIR=" << shell_quote(s.run_dir) << "\n"
    << "# Where `gtrain submit` ran: relative paths in the config (data, plugin, checkpoints, logs)\n"
    << "# resolve from here, as they would have for `gtrain run` there.\n"
    << "WORK_DIR=" << shell_quote(s.work_dir) << "\n"
    << "STAGE=\"${GTRAIN_STAGE:-" << s.index << "}\"\n"
    << "JOB_ID=\"${" << job_id_var << ":-}\"\n"
    << "# From the first moment a stop request (gtrain cancel's USR1, the time limit's) is kept, not lost:\n"
    << "# forwarded to gtrain run once it runs, and acknowledged in .stop-ack-STAGE (gtrain cancel repeats\n"
    << "# its request until it sees that, or the job is gone).\n"
    << "child=0 interrupted=0 requested=0\n"
    << "rm -f \"$RUN_DIR/.stop-ack-$STAGE\"\n"
    << "forward() {\n"
    << "  interrupted=1 requested=1\n"
    << "  { echo \"$JOB_ID\" > \"$RUN_DIR/.stop-ack-$STAGE\"; } 2>/dev/null\n"
    << "  [ \"$child\" -gt 0 ] && kill -USR1 \"$child\" 2>/dev/null\n"
    << "}\n"
    << "trap forward USR1 TERM\n"
    << "RUN_ARGS=(";
  for (size_t i = 0; i < s.run_args.size(); ++i) b << (i ? " " : "") << shell_quote(s.run_args[i]);
  b << ")\n";
  if (s.run_time_limit_s > 0) {
    b << "# No early signal: gtrain run stops itself by --time-limit, counted from its start, so the time\n"
      << "# this script has run already comes off. gtrain run saves ahead of that by its measured save time.\n"
      << "TIME_LIMIT=$(( " << s.run_time_limit_s << " - SECONDS ))\n"
      << "[ \"$TIME_LIMIT\" -ge 1 ] || TIME_LIMIT=1\n"
      << "RUN_ARGS+=(--time-limit \"${TIME_LIMIT}s\")\n";
  }
  b << "export GTRAIN_SUBMIT_SCHEDULER=" << scheduler << " GTRAIN_SUBMIT_STAGE=$STAGE\n"
    << "# The scheduler may grant fewer task slots than GPUs (one task per node): let mpirun place one\n"
    << "# rank per GPU anyway.\n"
    << "export OMPI_MCA_rmaps_base_oversubscribe=1\n"
    << "cd \"$WORK_DIR\" || exit 1\n"
    << "echo \"gtrain stage $STAGE (job $JOB_ID) on $(hostname) at $(date -u +%FT%TZ)\"\n"
    << "# gtrain run decides whether anything is left to do for this config (train.steps may have\n"
    << "# grown since the ledger last said complete): when not, it exits 0 at once.\n"
    << "# The scheduler signals this shell (--signal=B:USR1, and TERM at the limit): forward USR1 to\n"
    << "# gtrain (or mpirun, which forwards it to the ranks) so it saves before the kill.\n"
    << "ledger_lines=$(cat \"$RUN_DIR/stages.jsonl\" 2>/dev/null | wc -l)\n"
    << "rc=3\n"
    << "if [ \"$requested\" -eq 1 ]; then\n"
    << "  echo \"gtrain stage $STAGE: asked to stop before gtrain run started: nothing to save\"\n"
    << "else\n"
    << "# ${RUN_ARGS[@]+...}: an empty array is 'unbound' under set -u in bash before 4.4.\n";
  if (s.launcher == "srun") {
    // Open MPI ranks started by srun find each other through PMIx; Slurm's default is none. The job's
    // task count (a GPU each), which a later auto stage may change on the sbatch command line.
    b << "srun --mpi=pmix --kill-on-bad-exit=1 --ntasks=\"${SLURM_NTASKS:-" << s.gpus << "}\""
      << " \"$GTRAIN\" run \"$CONFIG\" --run-dir \"$RUN_DIR\" "
      << "${RUN_ARGS[@]+\"${RUN_ARGS[@]}\"} &\n";
  } else if (s.sweep) {
    // A sweep stage: as much of the search as the stage allows on the granted GPUs, its running
    // trials saved and paused at the stop request; the next stage continues it.
    b << "\"$GTRAIN\" sweep \"$CONFIG\" --dir \"$RUN_DIR\" ${RUN_ARGS[@]+\"${RUN_ARGS[@]}\"} &\n";
  } else {
    b << "\"$GTRAIN\" run \"$CONFIG\" --run-dir \"$RUN_DIR\" ${RUN_ARGS[@]+\"${RUN_ARGS[@]}\"} &\n";
  }
  b << "child=$!\n"
    << "# A request that came as gtrain run was being started: passed on once its handlers are in (it\n"
    << "# catches stop signals from its first moment; the second lets the loader finish).\n"
    << "if [ \"$requested\" -eq 1 ]; then sleep 1; kill -USR1 \"$child\" 2>/dev/null; fi\n"
    << "# A trapped signal cuts wait short (status 128+N): wait again while the child runs.\n"
    << "while :; do\n"
    << "  interrupted=0\n"
    << "  wait \"$child\"; rc=$?\n"
    << "  [ \"$interrupted\" -eq 1 ] && kill -0 \"$child\" 2>/dev/null || break\n"
    << "done\n"
    << "fi\n"
    << "# A signal that came just as gtrain run ended can leave bash without its status (128+N, -1): the\n"
    << "# stage's own line in stages.jsonl says how it ended.\n"
    << "if [ \"$interrupted\" -eq 1 ] && { [ \"$rc\" -gt 128 ] || [ \"$rc\" -lt 0 ]; } &&\n"
    << "   [ \"$(cat \"$RUN_DIR/stages.jsonl\" 2>/dev/null | wc -l)\" -gt \"$ledger_lines\" ]; then\n"
    << "  case \"$(tail -n 1 \"$RUN_DIR/stages.jsonl\")\" in\n"
    << "    *'\"exit\":\"completed\"'*) rc=0 ;;\n"
    << "    *'\"exit\":\"resumable'*) rc=3 ;;\n"
    << "  esac\n"
    << "fi\n"
    << "echo \"gtrain stage $STAGE: gtrain run exited $rc\"\n"
    << "# 0 = training complete, 3 = saved and resumable (the next stage continues), else failed.\n"
    << "\"$GTRAIN\" chain-step \"$RUN_DIR\" --stage \"$STAGE\" --exit \"$rc\" --job \"$JOB_ID\"\n"
    << "if [ \"$rc\" -eq 3 ]; then exit 0; fi\n"
    << "exit \"$rc\"\n";
  return b.str();
}

}  // namespace

std::string batch_script(const SchedulerBackend& scheduler, const BatchStage& s) {
  return scheduler.script_directives(s) + script_body(s, scheduler.name(), scheduler.job_id_variable());
}

std::string slurm_script(const BatchStage& s) {
  return batch_script(scheduler_backend(SchedulerKind::slurm), s);
}

std::string pbs_script(const BatchStage& s) {
  return batch_script(scheduler_backend(SchedulerKind::pbs), s);
}

}  // namespace gtrain
