// fnv.h: FNV-1a 64, the hash gtrain names things by (a run's identity, a tokenizer, prepared data):
// bytes fed in order, optionally as fields closed by a separator, read out as hex.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace gtrain {

class Fnv1a {
 public:
  // Feeds the bytes as they are.
  Fnv1a& add(std::string_view bytes) {
    for (unsigned char c : bytes) h_ = (h_ ^ c) * kPrime;
    return *this;
  }
  // Feeds one field and a 0xFF separator after it, so ("ab", "c") differs from ("a", "bc").
  Fnv1a& field(std::string_view bytes) {
    add(bytes);
    h_ = (h_ ^ 0xFF) * kPrime;
    return *this;
  }
  uint64_t value() const { return h_; }
  // The last `digits` hex digits (16: all of it).
  std::string hex(int digits = 16) const {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h_));
    return std::string(buf + 16 - digits);
  }

 private:
  static constexpr uint64_t kPrime = 1099511628211ull;
  uint64_t h_ = 1469598103934665603ull;
};

}  // namespace gtrain
