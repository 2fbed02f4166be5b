// A seeded, platform-independent random number generator: xoshiro256** seeded through SplitMix64.
// Everything random in fca (initialisation, batches, audit randomisations) draws from it, never from
// <random>'s distributions, whose outputs differ between standard libraries.
#pragma once
#include <cmath>
#include <cstdint>

namespace fca {

inline uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// Mixes a seed with stream identifiers (e.g. seed and step) into an independent seed, so that the
// randomness of step s does not depend on how many numbers earlier steps drew (resume stays exact).
inline uint64_t derive_seed(uint64_t seed, uint64_t a, uint64_t b = 0) {
  uint64_t s = seed ^ (0xA0761D6478BD642FULL * (a + 1));
  splitmix64(s);
  s ^= 0xE7037ED1A0B428DBULL * (b + 1);
  return splitmix64(s);
}

class Rng {
 public:
  explicit Rng(uint64_t seed) {
    uint64_t s = seed;
    for (auto& w : state_) w = splitmix64(s);
  }
  uint64_t next_u64() {
    const uint64_t result = rotl(state_[1] * 5, 7) * 9;
    const uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = rotl(state_[3], 45);
    return result;
  }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }
  // Uniform integer in [0, n), unbiased (Lemire's multiply-and-reject).
  uint64_t below(uint64_t n) {
    uint64_t x = next_u64();
    __uint128_t m = static_cast<__uint128_t>(x) * n;
    uint64_t low = static_cast<uint64_t>(m);
    if (low < n) {
      const uint64_t threshold = (0 - n) % n;
      while (low < threshold) {
        x = next_u64();
        m = static_cast<__uint128_t>(x) * n;
        low = static_cast<uint64_t>(m);
      }
    }
    return static_cast<uint64_t>(m >> 64);
  }
  // Standard normal by Box-Muller (one value per call; the pair's second value is discarded so that
  // the stream position never depends on call history).
  double normal() {
    const double u1 = 1.0 - uniform();  // (0, 1]
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t state_[4];
};

}  // namespace fca
