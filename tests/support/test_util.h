// test_util.h: helpers for tests: temporary directories, files, running the gtrain binary.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/core/model_stats.h"
#include "tests/support/test_paths.h"

namespace gtrain::test {

// What a token dataset of T-token samples over a V-token vocabulary tells a model.
inline DataSpec token_spec(int64_t T, int64_t V) {
  DataSpec s;
  s.input_shape = {T};
  s.vocab = V;
  s.tokens = true;
  return s;
}

// A fresh directory under /tmp removed at scope exit.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "gtrain-test-XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// The message of the E that `f` throws; "no error" when it throws none.
template <class E>
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "no error";
}

inline void write_file(const std::string& path, const std::string& content) {
  std::ofstream f(path, std::ios::binary);
  f << content;
}

inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs a shell command, capturing its output and exit code.
inline CommandResult run_command(const std::string& cmd) {
  CommandResult r;
  std::FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) r.output.append(buf, n);
  int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

inline std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string l;
  while (std::getline(ss, l)) {
    if (!l.empty()) out.push_back(l);
  }
  return out;
}

// Every line of a JSON-lines file (metrics.jsonl, stages.jsonl), parsed.
inline std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> out;
  for (const auto& l : lines(read_file(path))) out.push_back(nlohmann::json::parse(l));
  return out;
}

// How many times `what` occurs in `text`.
inline size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// `gtrain ARGS > LOG 2>&1` in its own process group (as a shell's foreground job), without waiting;
// with one rank the process becomes the rank. Returns its pid.
inline pid_t spawn_gtrain(const std::string& args, const std::string& log) {
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    execl("/bin/sh", "sh", "-c", ("exec " + GTRAIN_BINARY + " " + args + " > " + log + " 2>&1").c_str(),
          (char*)nullptr);
    _exit(127);
  }
  return pid;
}

// The exit code of a spawned process (128 + N when signal N ended it).
inline int wait_exit(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The step of the last training record in a metrics.jsonl (0 when none; partial lines skipped).
inline int last_train_step(const std::string& metrics_path) {
  int step = 0;
  for (const auto& l : lines(read_file(metrics_path))) {
    auto j = nlohmann::json::parse(l, nullptr, false);
    if (!j.is_discarded() && j.value("kind", "") == "train") step = j.at("step");
  }
  return step;
}

// Skips the current test in a sanitized build (GTRAIN_SANITIZE): for tests that measure the
// process's own memory, which then includes AddressSanitizer's shadow memory and quarantine.
#ifdef GTRAIN_SANITIZED
#define GTRAIN_SKIP_MEMORY_MEASURE_IF_SANITIZED() \
  GTEST_SKIP() << "measured memory includes AddressSanitizer's shadow memory and quarantine"
#else
#define GTRAIN_SKIP_MEMORY_MEASURE_IF_SANITIZED() static_cast<void>(0)
#endif

// Highest measured peak_mem_mb and the plan's est_mem_mb over the training records.
inline std::pair<double, double> memory_peak_and_estimate(const std::string& metrics_path) {
  double peak = 0, est = 0;
  for (const auto& l : lines(read_file(metrics_path))) {
    auto j = nlohmann::json::parse(l);
    if (j.value("kind", "") != "train") continue;
    peak = std::max(peak, j.at("peak_mem_mb").get<double>());
    est = j.at("est_mem_mb").get<double>();
  }
  return {peak, est};
}

}  // namespace gtrain::test
