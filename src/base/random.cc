#include "wds/base/random.h"

#include "base/split_mix64.h"

namespace wds {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t DeriveSeed(uint64_t seed, std::initializer_list<uint64_t> parts) {
  uint64_t h = SplitMix64(seed);
  for (uint64_t p : parts) h = SplitMix64(h ^ SplitMix64(p));
  return h;
}

uint64_t Rng::Below(uint64_t n) {
  // Rejection sampling on the top of the range keeps the result unbiased.
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do {
    x = engine_();
  } while (x >= limit);
  return x % n;
}

}  // namespace wds
