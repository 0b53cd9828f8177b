// lsf_backend.cpp: the LSF backend: discovery from LSB_MCPU_HOSTS, LSB_QUEUE, LSB_PROJECT_NAME and
// CUDA_VISIBLE_DEVICES. gtrain submits no LSF jobs: the rest keeps the "does not support" defaults.
#include <sstream>

#include "launcher/scheduler/discovery.h"
#include "launcher/scheduler/scheduler_backend.h"
#include "runtime/core/errors.h"

namespace gtrain {
namespace {

class LsfBackend : public SchedulerBackend {
 public:
  SchedulerKind kind() const override { return SchedulerKind::lsf; }

  bool detect(const std::map<std::string, std::string>& env) const override { return env.count("LSB_JOBID") > 0; }

  void discover(DiscoveryContext& r) const override {
    Allocation* a = r.a;
    a->job_id = r.str("LSB_JOBID");
    if (r.has("LSB_MCPU_HOSTS")) {
      const std::string text = r.str("LSB_MCPU_HOSTS");
      std::istringstream is(text);
      std::string host, slots;
      while (is >> host) {
        if (!(is >> slots) || !all_digits(slots)) {
          throw ConfigError("LSB_MCPU_HOSTS='" + text +
                            "': expected pairs of host and slot count, e.g. 'hostA 4 hostB 4'");
        }
        const int s = std::stoi(slots);
        a->nodes.push_back({host, {}, s, s});
        a->tasks += s;
      }
    }
    if (a->nodes.empty()) {
      a->nodes.push_back({a->this_host, {}, 0, 0});
      a->notes.push_back(std::string(r.has("LSB_MCPU_HOSTS") ? "LSB_MCPU_HOSTS is empty" : "LSB_MCPU_HOSTS not set") +
                         ": assuming this node only");
    }
    size_t me = find_this_node(*a);
    if (me == a->nodes.size()) me = 0;
    std::string var;
    std::vector<int> mine;
    if (auto vis = r.visible_devices(&var)) mine = r.visible_list(*vis, var);
    assign_gpus(a, me, mine, static_cast<int>(mine.size()), true);
    a->partition = r.str("LSB_QUEUE");
    a->account = r.str("LSB_PROJECT_NAME");
    a->user = r.str("USER");
    a->notes.push_back("LSF run limit and end time are not read: unknown");
    fill_gpu_facts(a, r.hw, me);
  }
};

}  // namespace

const SchedulerBackend& lsf_backend() {
  static const LsfBackend backend;
  return backend;
}

}  // namespace gtrain
