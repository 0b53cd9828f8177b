// scheduler_backend.cpp: the registry over the detection list, and the
// defaults for what a backend does not support.
#include "launcher/scheduler/scheduler_backend.h"

#include <algorithm>
#include <iterator>

#include <nlohmann/json.hpp>

#include "runtime/core/errors.h"
#include "runtime/core/format.h"

namespace gtrain {

// Each backend's file defines its NAME_backend().
#define GTRAIN_SCHEDULER_DECLARE(name) const SchedulerBackend& name##_backend();
GTRAIN_SCHEDULER_BACKENDS(GTRAIN_SCHEDULER_DECLARE)
#undef GTRAIN_SCHEDULER_DECLARE

namespace {

std::vector<const SchedulerBackend*>& test_backends() {
  static std::vector<const SchedulerBackend*> v;
  return v;
}

}  // namespace

std::vector<const SchedulerBackend*> scheduler_backends() {
  std::vector<const SchedulerBackend*> list = test_backends();
#define GTRAIN_SCHEDULER_ENTRY(name) list.push_back(&name##_backend());
  GTRAIN_SCHEDULER_BACKENDS(GTRAIN_SCHEDULER_ENTRY)
#undef GTRAIN_SCHEDULER_ENTRY
  return list;
}

const SchedulerBackend& scheduler_backend(SchedulerKind kind) {
  for (const SchedulerBackend* b : scheduler_backends()) {
    if (b->kind() == kind) return *b;
  }
  throw Error(std::string("no scheduler backend for ") + scheduler_name(kind));
}

const SchedulerBackend* find_scheduler_backend(const std::string& name) {
  const auto kind = scheduler_from_name(name);
  return kind ? &scheduler_backend(*kind) : nullptr;
}

const SchedulerBackend& detect_scheduler(const std::map<std::string, std::string>& env) {
  for (const SchedulerBackend* b : scheduler_backends()) {
    if (b->detect(env)) return *b;
  }
  return scheduler_backend(SchedulerKind::local);
}

ScopedSchedulerBackend::ScopedSchedulerBackend(const SchedulerBackend& backend) : backend_(&backend) {
  auto& v = test_backends();
  v.insert(v.begin(), backend_);
}

ScopedSchedulerBackend::~ScopedSchedulerBackend() {
  auto& v = test_backends();
  v.erase(std::find(v.begin(), v.end(), backend_));
}

CommandOutput run_merged(const CommandRunner& runner, const std::vector<std::string>& argv) {
  // CommandRunner returns stdout only when the command succeeds: wrap it in bash so stderr is
  // merged and the exit code is printed last, whatever happens.
  std::vector<std::string> wrapped = {"bash", "-c", "\"$@\" 2>&1; echo \"gtrain-rc=$?\"", "gtrain"};
  wrapped.insert(wrapped.end(), argv.begin(), argv.end());
  CommandOutput r;
  auto out = runner(wrapped);
  if (!out) {
    r.text = argv.empty() ? "" : argv[0] + ": could not be run";
    return r;
  }
  const auto pos = out->rfind("gtrain-rc=");
  if (pos == std::string::npos) {
    r.text = *out;
    return r;
  }
  r.text = out->substr(0, pos);
  r.rc = std::atoi(out->c_str() + pos + 10);
  return r;
}

// Defaults: what a backend does not override, it does not support.

void SchedulerBackend::unsupported(const std::string& what) const {
  throw ConfigError(str("scheduler ", name(), " does not support ", what), "choose another scheduler with --scheduler");
}

SchedulerLimits SchedulerBackend::read_limits(const Allocation&, const CommandRunner&) const {
  unsupported("reading limits");
}
std::string SchedulerBackend::submit_program() const {
  unsupported("submitting jobs");
}
std::string SchedulerBackend::script_suffix() const {
  unsupported("batch scripts");
}
std::string SchedulerBackend::job_id_variable() const {
  unsupported("batch scripts");
}
std::string SchedulerBackend::script_directives(const BatchStage&) const {
  unsupported("batch scripts");
}
std::string SchedulerBackend::time_limit_text(int64_t) const {
  unsupported("a job time limit");
}
void SchedulerBackend::check_qos(const std::string&) const {}
void SchedulerBackend::check_launcher(const std::string&) const {}
void SchedulerBackend::check_directive(const std::string&) const {}
void SchedulerBackend::check_time_limit(const std::string&, const std::string&, double, const CommandRunner&) const {}
std::vector<std::string> SchedulerBackend::submit_argv(const SubmitRequest&) const {
  unsupported("submitting jobs");
}
std::vector<std::string> SchedulerBackend::dependency_args(const std::string&) const {
  unsupported("job dependencies");
}
std::string SchedulerBackend::begin_time(double) const {
  unsupported("a begin time");
}
std::vector<std::string> SchedulerBackend::begin_args(const std::string&) const {
  unsupported("a begin time");
}
std::vector<std::string> SchedulerBackend::stage_env_args(int) const {
  unsupported("submitting jobs");
}
std::string SchedulerBackend::shell_job_id_fixup(const std::string&) const {
  return "";
}
void SchedulerBackend::resize_submit_argv(std::vector<std::string>&, int, int, const std::string&, int) const {
  unsupported("resizing a job");
}
void SchedulerBackend::renumber_submit_argv(std::vector<std::string>&, const std::string&, int) const {}
std::optional<std::vector<std::string>> SchedulerBackend::test_submit_argv(const std::vector<std::string>&, int,
                                                                           int) const {
  return std::nullopt;
}
std::vector<std::string> SchedulerBackend::cancel_argv(const std::string&) const {
  unsupported("cancelling jobs");
}
std::vector<std::string> SchedulerBackend::signal_argv(const std::string&) const {
  unsupported("signalling jobs");
}
std::string SchedulerBackend::kill_grace_name() const {
  unsupported("cancelling jobs");
}
std::optional<std::map<std::string, JobState>> SchedulerBackend::job_states(const std::vector<std::string>&,
                                                                            const CommandRunner&) const {
  unsupported("job states");
}
std::optional<double> SchedulerBackend::test_submit_start(const std::string&) const {
  return std::nullopt;
}
std::optional<double> SchedulerBackend::job_submit_time(const std::string&, const CommandRunner&) const {
  return std::nullopt;
}
bool SchedulerBackend::job_gone(const std::string&, const CommandRunner&) const {
  unsupported("job states");
}
ClusterReading SchedulerBackend::read_cluster(const ClusterQuery&, const CommandRunner&) const {
  unsupported("gtrain cluster (reading partitions, history and quotas)");
}

std::map<std::string, std::string> SchedulerBackend::status_details(const std::vector<std::string>&,
                                                                    const std::set<std::string>&,
                                                                    const CommandRunner&) const {
  return {};
}

}  // namespace gtrain
