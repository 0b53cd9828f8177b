// rng.h: small counter-based random numbers (splitmix64) that give the same stream on every
// platform, library version and thread; data order and synthetic data depend only on them.
#pragma once

#include <cmath>
#include <cstdint>

namespace gtrain::rng {

inline uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

inline uint64_t hash(uint64_t a, uint64_t b) {
  return mix(mix(a) ^ (b * 0xd1b54a32d192ed03ull));
}
inline uint64_t hash(uint64_t a, uint64_t b, uint64_t c) {
  return hash(hash(a, b), c);
}

// Sequential generator for a stream identified by a key.
class Stream {
 public:
  explicit Stream(uint64_t key) : state_(key) {}
  uint64_t next() { return mix(state_++ ^ 0x5851f42d4c957f2dull); }
  double uniform() { return (next() >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
  double normal() {
    double u1 = uniform(), u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  uint64_t below(uint64_t n) { return next() % n; }  // bias is negligible for n << 2^64

 private:
  uint64_t state_;
};

}  // namespace gtrain::rng
