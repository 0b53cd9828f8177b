// machine_notes.cpp: once-per-machine notes kept as marker files beside the hardware profiles.
#include "runtime/core/machine_notes.h"

#include <filesystem>
#include <fstream>
#include <system_error>

namespace gtrain {

namespace fs = std::filesystem;

std::string machine_note_path(const std::map<std::string, std::string>& env, const std::string& host,
                              const std::string& key) {
  std::string dir;
  if (auto it = env.find("GTRAIN_PROFILE_DIR"); it != env.end() && !it->second.empty()) {
    dir = it->second;
  } else if (auto home = env.find("HOME"); home != env.end() && !home->second.empty()) {
    dir = home->second + "/.cache/gtrain";
  }
  if (dir.empty()) return "";
  return dir + "/note-" + key + "-" + (host.empty() ? std::string("localhost") : host);
}

bool first_time_on_this_machine(const std::map<std::string, std::string>& env, const std::string& host,
                                const std::string& key) {
  const std::string path = machine_note_path(env, host, key);
  if (path.empty()) return true;
  std::error_code ec;
  if (fs::exists(path, ec)) return false;
  fs::create_directories(fs::path(path).parent_path(), ec);
  std::ofstream(path) << "said once on this machine; delete this file to hear it again\n";
  return true;
}

void forget_machine_note(const std::map<std::string, std::string>& env, const std::string& host,
                         const std::string& key) {
  const std::string path = machine_note_path(env, host, key);
  std::error_code ec;
  if (!path.empty()) fs::remove(path, ec);
}

}  // namespace gtrain
