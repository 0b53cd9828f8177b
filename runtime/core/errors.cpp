// errors.cpp: ProcessContext and error formatting.
#include "runtime/core/errors.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace gtrain {

ProcessContext& ProcessContext::get() {
  static ProcessContext ctx = [] {
    ProcessContext c;
    char buf[256] = {0};
    if (gethostname(buf, sizeof(buf) - 1) == 0) c.host = buf;
    return c;
  }();
  return ctx;
}

Error::Error(const std::string& what, std::string hint, const char* file, int line)
    : std::runtime_error(what), hint_(std::move(hint)) {
  if (file) {
    const char* base = std::strrchr(file, '/');
    // Keep "dir/file.cpp" so the component is visible.
    if (base && base != file) {
      const char* p = base - 1;
      while (p > file && *p != '/') --p;
      base = (*p == '/') ? p + 1 : p;
    } else {
      base = file;
    }
    location_ = std::string(base) + ":" + std::to_string(line);
  }
}

bool is_disk_full_errno(int err) {
  return err == ENOSPC || err == EDQUOT || err == EROFS;
}

std::string first_line(const std::string& text) {
  return text.substr(0, text.find('\n'));
}

std::string format_error(const Error& e) {
  const auto& ctx = ProcessContext::get();
  std::string out = "gtrain: ";
  out += e.kind();
  out += ": ";
  out += e.what();
  if (ctx.world_size > 1) out += " [rank " + std::to_string(ctx.rank) + " on " + ctx.host + "]";
  if (!e.location().empty()) out += " (" + e.location() + ")";
  if (!e.hint().empty()) out += "; hint: " + e.hint();  // one line: bad input gets one line
  return out;
}

}  // namespace gtrain
