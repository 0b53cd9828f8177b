// hostlist.cpp: expansion and compression of Slurm hostlists and count lists.
#include "launcher/scheduler/hostlist.h"

#include <cctype>
#include <cstdint>
#include <map>
#include <set>

#include "runtime/core/errors.h"

namespace gtrain {
namespace {

constexpr size_t kMaxHosts = 1 << 20;  // refuse to expand absurd lists instead of exhausting memory

[[noreturn]] void bad_hostlist(const std::string& what, const std::string& text, const std::string& why) {
  throw ConfigError(what + "='" + text + "': " + why +
                    "; expected a Slurm hostlist such as gpu[01-03,07],cpu5 or a[1-2]-ib,b3");
}

bool host_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
}

// One bracketed range list, e.g. "01-03,07", expanded to zero-padded strings.
std::vector<std::string> expand_ranges(const std::string& body, const std::string& what, const std::string& text) {
  std::vector<std::string> out;
  if (body.empty()) bad_hostlist(what, text, "empty brackets");
  size_t pos = 0;
  while (pos <= body.size()) {
    size_t comma = body.find(',', pos);
    if (comma == std::string::npos) comma = body.size();
    const std::string r = body.substr(pos, comma - pos);
    const size_t dash = r.find('-');
    const std::string lo = r.substr(0, dash), hi = dash == std::string::npos ? lo : r.substr(dash + 1);
    auto digits = [](const std::string& s) {
      if (s.empty() || s.size() > 18) return false;
      for (char c : s) {
        if (!std::isdigit(static_cast<unsigned char>(c))) return false;
      }
      return true;
    };
    if (!digits(lo) || !digits(hi)) bad_hostlist(what, text, "range '" + r + "' is not N or N-M");
    const int64_t a = std::stoll(lo), b = std::stoll(hi);
    if (b < a) bad_hostlist(what, text, "range '" + r + "' goes backwards");
    if (static_cast<size_t>(b - a) >= kMaxHosts) bad_hostlist(what, text, "range '" + r + "' is too large");
    const size_t width = lo.size();
    for (int64_t v = a; v <= b; ++v) {
      std::string s = std::to_string(v);
      if (s.size() < width) s.insert(0, width - s.size(), '0');
      out.push_back(s);
    }
    if (out.size() > kMaxHosts) bad_hostlist(what, text, "more than 1048576 hosts");
    pos = comma + 1;
    if (comma == body.size()) break;
  }
  return out;
}

// One top-level item such as "rack[1-2]-n[01-04]".
void expand_item(const std::string& item, const std::string& what, const std::string& text,
                 std::vector<std::string>* out) {
  if (item.empty()) bad_hostlist(what, text, "empty host name");
  std::vector<std::string> partial = {""};
  size_t i = 0;
  while (i < item.size()) {
    const char c = item[i];
    if (c == '[') {
      const size_t close = item.find(']', i);
      if (close == std::string::npos) bad_hostlist(what, text, "unbalanced '['");
      const std::string body = item.substr(i + 1, close - i - 1);
      if (body.find('[') != std::string::npos) bad_hostlist(what, text, "nested '['");
      const auto values = expand_ranges(body, what, text);
      std::vector<std::string> next;
      if (partial.size() * values.size() > kMaxHosts) bad_hostlist(what, text, "more than 1048576 hosts");
      next.reserve(partial.size() * values.size());
      for (const auto& p : partial) {
        for (const auto& v : values) next.push_back(p + v);
      }
      partial = std::move(next);
      i = close + 1;
    } else if (c == ']') {
      bad_hostlist(what, text, "unbalanced ']'");
    } else if (host_char(c)) {
      for (auto& p : partial) p += c;
      ++i;
    } else {
      bad_hostlist(what, text, std::string("unexpected character '") + c + "'");
    }
  }
  if (out->size() + partial.size() > kMaxHosts) bad_hostlist(what, text, "more than 1048576 hosts");
  out->insert(out->end(), partial.begin(), partial.end());
}

}  // namespace

std::vector<std::string> expand_hostlist(const std::string& text, const std::string& what) {
  std::vector<std::string> hosts;
  if (text.empty()) return hosts;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    const char c = i < text.size() ? text[i] : ',';
    if (c == '[') {
      if (++depth > 1) bad_hostlist(what, text, "nested '['");
    } else if (c == ']') {
      if (--depth < 0) bad_hostlist(what, text, "unbalanced ']'");
    } else if (c == ',' && depth == 0) {
      expand_item(text.substr(start, i - start), what, text, &hosts);
      start = i + 1;
    }
  }
  if (depth != 0) bad_hostlist(what, text, "unbalanced '['");
  std::set<std::string> seen;
  for (const auto& h : hosts) {
    if (!seen.insert(h).second) bad_hostlist(what, text, "host " + h + " appears more than once");
  }
  return hosts;
}

std::string compress_hostlist(const std::vector<std::string>& hosts) {
  // Split each name into prefix + trailing digits; merge runs of consecutive numbers with the
  // same prefix and width.
  struct Group {
    std::string prefix;
    std::vector<std::pair<int64_t, size_t>> nums;  // value, digit width
    std::string plain;                             // a name without a numeric suffix
  };
  std::vector<Group> groups;
  for (const auto& h : hosts) {
    size_t d = h.size();
    while (d > 0 && std::isdigit(static_cast<unsigned char>(h[d - 1]))) --d;
    if (d == h.size() || h.size() - d > 18) {
      groups.push_back({"", {}, h});
      continue;
    }
    const std::string prefix = h.substr(0, d);
    const std::pair<int64_t, size_t> num{std::stoll(h.substr(d)), h.size() - d};
    if (!groups.empty() && groups.back().plain.empty() && groups.back().prefix == prefix) {
      groups.back().nums.push_back(num);
    } else {
      groups.push_back({prefix, {num}, ""});
    }
  }
  std::string out;
  for (const auto& g : groups) {
    if (!out.empty()) out += ",";
    if (!g.plain.empty()) {
      out += g.plain;
      continue;
    }
    auto fmt = [](int64_t v, size_t w) {
      std::string s = std::to_string(v);
      if (s.size() < w) s.insert(0, w - s.size(), '0');
      return s;
    };
    if (g.nums.size() == 1) {
      out += g.prefix + fmt(g.nums[0].first, g.nums[0].second);
      continue;
    }
    std::string body;
    for (size_t i = 0; i < g.nums.size();) {
      size_t j = i;
      while (j + 1 < g.nums.size() && g.nums[j + 1].first == g.nums[j].first + 1 &&
             g.nums[j + 1].second == g.nums[i].second) {
        ++j;
      }
      if (!body.empty()) body += ",";
      body += fmt(g.nums[i].first, g.nums[i].second);
      if (j > i) body += "-" + fmt(g.nums[j].first, g.nums[i].second);
      i = j + 1;
    }
    out += g.prefix + "[" + body + "]";
  }
  return out;
}

std::vector<int> expand_count_list(const std::string& text, const std::string& what) {
  std::vector<int> out;
  auto fail = [&] { throw ConfigError(what + "='" + text + "': expected counts such as 2(x2),1 or 72(x3)"); };
  if (text.empty()) fail();
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = text.substr(pos, comma - pos);
    size_t n = 0;
    while (n < item.size() && std::isdigit(static_cast<unsigned char>(item[n]))) ++n;
    if (n == 0 || n > 9) fail();
    const int value = std::stoi(item.substr(0, n));
    int repeat = 1;
    if (n < item.size()) {
      // "(xK)"
      if (item.size() < n + 4 || item.compare(n, 2, "(x") != 0 || item.back() != ')') fail();
      const std::string k = item.substr(n + 2, item.size() - n - 3);
      if (k.empty() || k.size() > 7) fail();
      for (char c : k) {
        if (!std::isdigit(static_cast<unsigned char>(c))) fail();
      }
      repeat = std::stoi(k);
      if (repeat < 1) fail();
    }
    if (out.size() + static_cast<size_t>(repeat) > kMaxHosts) fail();
    out.insert(out.end(), static_cast<size_t>(repeat), value);
    if (comma == text.size()) break;
    pos = comma + 1;
  }
  return out;
}

bool same_host(const std::string& a, const std::string& b) {
  return a == b || a.substr(0, a.find('.')) == b.substr(0, b.find('.'));
}

}  // namespace gtrain
