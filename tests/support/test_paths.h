// test_paths.h: where the suites find gtrain, the plugin, the source tree and the Slurm harness.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>

namespace gtrain::test {

// The value of KEY: the environment's when set, else the line KEY=VALUE of gtrain-test-paths.txt
// beside the test executable (tests/CMakeLists.txt writes it). Read at run time rather than compiled
// in, so no object file holds the clone's absolute paths and ccache reuses the tests' objects
// across clones (CI's fresh one among them). A missing key ends the test program with one line.
inline std::string test_path(const char* key) {
  if (const char* env = std::getenv(key); env && *env) return env;
  static const std::map<std::string, std::string> table = [] {
    std::map<std::string, std::string> t;
    char exe[4096];
    const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return t;
    std::string file(exe, static_cast<size_t>(n));
    file = file.substr(0, file.rfind('/') + 1) + "gtrain-test-paths.txt";
    std::ifstream in(file);
    for (std::string line; std::getline(in, line);) {
      const auto eq = line.find('=');
      if (eq != std::string::npos) t[line.substr(0, eq)] = line.substr(eq + 1);
    }
    return t;
  }();
  const auto it = table.find(key);
  if (it == table.end()) {
    std::fprintf(stderr,
                 "test_paths: %s is neither set nor in gtrain-test-paths.txt beside this test "
                 "executable (rerun cmake for the build tree)\n",
                 key);
    std::exit(2);
  }
  return it->second;
}

}  // namespace gtrain::test

#define GTRAIN_BINARY (::gtrain::test::test_path("GTRAIN_BINARY"))
#define GTRAIN_PLUGIN (::gtrain::test::test_path("GTRAIN_PLUGIN"))
#define GTRAIN_SOURCE_DIR (::gtrain::test::test_path("GTRAIN_SOURCE_DIR"))
#define GTRAIN_SLURM_DIR (::gtrain::test::test_path("GTRAIN_SLURM_DIR"))
