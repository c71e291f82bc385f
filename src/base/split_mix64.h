// SplitMix64: the bit mixer behind DeriveSeed.
#pragma once

#include <cstdint>

namespace wds {

// SplitMix64 is the finaliser of Steele, Lea and Flood's SplitMix64 generator.
uint64_t SplitMix64(uint64_t x);

}  // namespace wds
