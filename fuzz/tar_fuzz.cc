// Tar shards (plain, gzip, zstd, bzip2, xz: detected from the content) through
// the reader and the grouping, a header-only scan, and a second read started
// at a sample's offset, which must give the same samples as the full read.
// A third read gets the same bytes in short reads of a length chosen by the
// input, so that reads end anywhere inside headers, members and compressed
// frames, not only where the reader's 1 MiB buffer would end them: it must
// give exactly what the full read gave.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "tar/index_lookup.h"
#include "wds/internal/tar/shard_scan.h"
#include "wds/internal/tar/tar_grouping.h"
#include "wds/io/byte_stream.h"
#include "wds/tar/shard_index.h"

namespace {

// Larger than any member a plain input of -max_len (64 KiB) can hold, and
// small enough that a lying size in a compressed input costs little per read;
// members above it take the refusal path, which is fuzzed too.
constexpr int64_t kMaxMember = int64_t{1} << 20;
// The whole of an input (at most -max_len, 64 KiB) arrives in one read with
// this buffer as with the default 1 MiB one, which under ASan costs a fresh
// mapping, its page faults and its quarantine in every one of the reads an
// input gets (twice as slow). The short-read pass covers other boundaries.
constexpr size_t kReadBuffer = size_t{64} << 10;

// ChunkedStream serves a stream's bytes in reads of at most `chunk` bytes.
class ChunkedStream : public wds::ByteStream {
 public:
  ChunkedStream(std::unique_ptr<wds::ByteStream> stream, size_t chunk)
      : stream_(std::move(stream)), chunk_(chunk) {}
  absl::StatusOr<size_t> Read(void* buffer, size_t size) override {
    return stream_->Read(buffer, std::min(size, chunk_));
  }
  absl::Status Finish() override { return stream_->Finish(); }
  const std::string& url() const override { return stream_->url(); }

 private:
  std::unique_ptr<wds::ByteStream> stream_;
  size_t chunk_;
};

// Keys reads every sample of `tar` from `start`, in reads of at most `chunk`
// bytes when it is not 0; false on an error.
bool Keys(const std::string& tar, int64_t start, std::vector<std::string>& keys, size_t chunk = 0) {
  wds::ShardSampleReaderOptions options;
  options.tar.max_member_size = kMaxMember;
  options.tar.read_buffer_size = kReadBuffer;
  options.tar.start_offset = start;
  std::unique_ptr<wds::ByteStream> stream = wds::MemoryStream("fuzz.tar", tar);
  if (chunk > 0) stream = std::make_unique<ChunkedStream>(std::move(stream), chunk);
  auto reader = wds::ShardSampleReader::Open(std::move(stream), options);
  if (!reader.ok()) return false;
  while (true) {
    auto sample = (*reader)->Next();
    if (!sample.ok()) return false;
    if (!sample->has_value()) return true;
    keys.push_back((*sample)->key);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string tar(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> all;
  const bool complete = Keys(tar, 0, all);
  // Short reads of 1..4093 bytes, fixed by the input so a crash replays.
  std::vector<std::string> chunked;
  const size_t chunk = 1 + (size == 0 ? 0 : (data[size / 2] * 31u + data[size - 1]) % 4093);
  if (Keys(tar, 0, chunked, chunk) != complete || chunked != all) __builtin_trap();
  auto index = wds::ScanStream(wds::MemoryStream("fuzz.tar", tar));
  if (!complete || !index.ok() || index->samples.size() != all.size()) return 0;
  // A read that starts at sample k gives samples k.. of the full read.
  const std::vector<int64_t> starts = wds::SampleStartOffsets(*index);
  for (size_t k : std::set<size_t>{1, starts.size() / 2, starts.size() - 1}) {
    if (k == 0 || k >= starts.size()) continue;
    std::vector<std::string> tail;
    if (!Keys(tar, starts[k], tail)) __builtin_trap();
    if (tail != std::vector<std::string>(all.begin() + k, all.end())) __builtin_trap();
  }
  return 0;
}
