// test_util.h: helpers for tests: temporary directories, files, running the gtrain binary.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace gtrain::test {

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

// The step of the last training record in a metrics.jsonl (0 when none; partial lines skipped).
inline int last_train_step(const std::string& metrics_path) {
  int step = 0;
  for (const auto& l : lines(read_file(metrics_path))) {
    auto j = nlohmann::json::parse(l, nullptr, false);
    if (!j.is_discarded() && j.value("kind", "") == "train") step = j.at("step");
  }
  return step;
}

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
