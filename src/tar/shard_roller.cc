// Upper bounds of tar footprints and the shard rolling rule.
#include "wds/internal/tar/shard_roller.h"

#include <optional>

#include "wds/internal/base/strings.h"

namespace wds {
namespace {

constexpr int64_t kBlock = 512;
// The end-of-archive marker TarWriter writes: two zero blocks.
constexpr int64_t kEndOfArchive = 2 * kBlock;
// The largest size a ustar header's 11 octal digits hold.
constexpr int64_t kMaxUstarSize = (int64_t{1} << 33) - 1;

int64_t RoundUp(int64_t n) { return (n + kBlock - 1) / kBlock * kBlock; }

bool NeedsPax(std::string_view name, int64_t size) {
  if (name.size() >= 100 || size > kMaxUstarSize) return true;
  for (char c : name) {
    if (static_cast<unsigned char>(c) >= 0x80) return true;
  }
  return false;
}

// ValueSize is the length of the text TarWriter writes for `value`; nullopt
// for values it refuses.
std::optional<int64_t> ValueSize(const Value& value) {
  if (const Buffer* b = std::get_if<Buffer>(&value)) return static_cast<int64_t>(b->size());
  if (const std::string* s = std::get_if<std::string>(&value)) {
    return static_cast<int64_t>(s->size());
  }
  if (const int64_t* i = std::get_if<int64_t>(&value)) {
    return static_cast<int64_t>(Cat(*i).size());
  }
  if (const double* d = std::get_if<double>(&value)) return static_cast<int64_t>(Cat(*d).size());
  return std::nullopt;
}

}  // namespace

int64_t MemberFootprint(std::string_view name, int64_t size) {
  int64_t bytes = kBlock + RoundUp(size);
  if (NeedsPax(name, size)) {
    // A pax extended header: its own header block plus records that hold the
    // name (at most 3 bytes of escaping per byte is more than enough) and a
    // size; the bound need not be tight, only never below the real size.
    bytes += kBlock + RoundUp(3 * static_cast<int64_t>(name.size()) + 256);
  }
  return bytes;
}

int64_t TarFootprint(const Sample& sample) {
  const std::string_view key = sample.key();
  int64_t bytes = 0;
  for (const Sample::Field& f : sample) {
    if (f.first.empty() || f.first[0] == '_') continue;
    const std::optional<int64_t> size = ValueSize(f.second);
    if (!size.has_value()) continue;
    bytes += MemberFootprint(Cat(key, ".", f.first), *size);
  }
  return bytes;
}

bool ShardRoller::Add(int64_t footprint) {
  if (count_ > 0 && count_ < maxcount_ && bytes_ + footprint + kEndOfArchive <= maxsize_) {
    ++count_;
    bytes_ += footprint;
    return false;
  }
  count_ = 1;
  bytes_ = footprint;
  return true;
}

}  // namespace wds
