// text_util.h: small string helpers shared by the launcher (trim, split, local time both ways).
#pragma once

#include <cctype>
#include <ctime>
#include <optional>
#include <string>
#include <vector>

namespace gtrain::text {

inline std::string trim(const std::string& s) {
  size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return s.substr(a, b - a);
}

// Splits on every `sep`, keeping empty fields ("a,,b" -> {"a", "", "b"}).
inline std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

// A unix time as local time in strftime `format` ("-" for a time of 0 or less).
inline std::string local_time(double unix_time, const char* format) {
  if (unix_time <= 0) return "-";
  const std::time_t t = static_cast<std::time_t>(unix_time);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, format, &tm);
  return buf;
}

// Local time text in strptime `format` (all of it) -> unix time; nullopt when it does not parse.
inline std::optional<double> parse_local_time(const std::string& text, const char* format) {
  std::tm tm{};
  const char* end = strptime(text.c_str(), format, &tm);
  if (!end || *end != '\0') return std::nullopt;
  tm.tm_isdst = -1;  // whether summer time applies: mktime decides
  const std::time_t t = std::mktime(&tm);
  if (t == static_cast<std::time_t>(-1)) return std::nullopt;
  return static_cast<double>(t);
}

}  // namespace gtrain::text
