// Deterministic seeding and random numbers.
//
// Every random choice in a pipeline (shard permutation, resampling, shuffle
// buffer) draws from an Rng seeded by DeriveSeed over the parts that must make
// it differ:
//
//   shard permutation   DeriveSeed(seed, {kShardPermutation, epoch, pass})
//   resampled shards    DeriveSeed(seed, {kResample, epoch, pass, rank, worker})
//   shuffle buffer      DeriveSeed(seed, {kShuffle, epoch, pass, rank, worker})
//   decode (augment)    DeriveSeed(seed, {kDecode, epoch, pass, rank, worker})
//   elastic resume      the shuffle buffer's seed, then {kElasticResume, generation}
//
// The shard permutation leaves out rank and worker on purpose: every rank must
// compute the same permutation so that split_by_node hands out disjoint shards.
// DeriveSeed folds each part in with SplitMix64, so (1, 2) and (2, 1) differ.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <random>

namespace wds {

// Domain tags keep the streams of different consumers apart.
enum SeedDomain : uint64_t {
  kShardPermutation = 1,
  kResample = 2,
  kShuffle = 3,
  kUserStage = 4,
  kDecode = 5,
  kElasticResume = 6,
};

// DeriveSeed mixes `seed` with `parts`, in order.
uint64_t DeriveSeed(uint64_t seed, std::initializer_list<uint64_t> parts);

// Rng is a 64-bit Mersenne Twister with platform-independent helpers (the
// standard distributions are not portable across standard libraries).
// Not thread-safe: one per stream.
class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}
  uint64_t Next() { return engine_(); }
  // Below returns a uniform integer in [0, n). REQUIRES: n > 0.
  uint64_t Below(uint64_t n);
  // Uniform returns a uniform double in [0, 1).
  double Uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }

 private:
  std::mt19937_64 engine_;
};

}  // namespace wds
