// GzipFileSink: writes a byte stream to a file as one gzip member (RFC 1952:
// no name, time 0, the CRC-32 and length of the data), compressed in
// independent 128 KiB blocks, each primed with the 32 KiB of data before it,
// on `threads` threads (the writing thread's own when 1).
//
//   absl::StatusOr<std::unique_ptr<GzipFileSink>> sink = GzipFileSink::Create("a.tar.gz", 6, 4);
//   if (!(*sink)->Write(tar_bytes) || !(*sink)->Finish()) ... (*sink)->error_message() ...
//
// The blocks' deflate streams end byte-aligned (an empty stored block, as a
// sync flush makes), so they join into one deflate stream that every gzip
// reader inflates whole: gzip(1), zlib, libarchive, and Python's gzip and
// tarfile (streaming "r|gz" included, which reads one member only). The
// bytes depend on the data and the level alone, never on the thread count
// or how the data was cut into writes; they are larger than one deflate
// stream's by about 100 bytes a block (a sync flush, new code tables: a few
// percent of highly repetitive data), and not those of gzip(1).
//
// Up to 2 x threads - 1 blocks are in flight (about 300 KiB each with their
// dictionary and output). When no thread can be started the writing thread
// compresses (the same bytes). Thread safety: one thread at a time; its
// threads take no asynchronous signals.
#pragma once

#include <zlib.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "tar/file_sink.h"

namespace wds {

class GzipFileSink : public FileSink {
 public:
  static constexpr size_t kBlockSize = size_t{128} << 10;
  // kWindow is deflate's window: what each block is primed with.
  static constexpr size_t kWindow = size_t{32} << 10;

  // Create checks `level` (negative: zlib's default, 6) and `threads`, then
  // truncates or creates `path` ("-" is standard output, never closed). A
  // level above 9, or threads outside 1..kMaxCompressionThreads, is
  // InvalidArgument naming `path`, and no file is created; a file that
  // cannot be created is the system's error naming it.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<GzipFileSink>> Create(const std::string& path,
                                                                            int level, int threads);
  // Stops and joins the threads; a sink not finished leaves a partial file.
  ~GzipFileSink() override;

  [[nodiscard]] bool Write(std::string_view data) override;
  // Finish a second time only returns whether the first succeeded.
  [[nodiscard]] bool Finish() override;
  // error_message: "Write error", "Close error", or zlib's reason.
  int error_number() const override { return file_.error_number(); }
  const std::string& error_message() const override { return file_.error_message(); }

 private:
  struct Block {
    std::string input;
    std::string dictionary;  // up to kWindow bytes of the data before `input`
    bool last = false;
    // Set by the compressor, then `done`.
    std::string output;
    uint32_t crc = 0;
    bool ok = true;
    bool done = false;
  };
  // Deflater is one z_stream for raw deflate at a level, made once.
  class Deflater {
   public:
    explicit Deflater(int level);
    ~Deflater();
    Deflater(const Deflater&) = delete;
    Deflater& operator=(const Deflater&) = delete;
    // Compress fills block.output, .crc and .ok from block.input.
    void Compress(Block& block);

   private:
    void Deflate(Block& block);

    z_stream z_{};
    bool ready_;
  };

  GzipFileSink(FileOutput file, int level, int threads);
  // Submit hands the block being filled to the compressors (or compresses
  // it here with one thread), then writes out blocks while too many wait.
  bool Submit(bool last);
  // WriteFront waits for the oldest block and writes it out.
  bool WriteFront();
  void Work();
  // StopWorkers tells the threads to stop and joins them.
  void StopWorkers();

  FileOutput file_;
  const int level_;
  // in_flight_ bounds the blocks submitted and not yet written out.
  const size_t in_flight_;
  bool finished_ = false;
  std::string filling_;
  std::string tail_;  // the last kWindow bytes submitted
  bool header_written_ = false;
  uint32_t crc_ = 0;
  uint64_t size_ = 0;
  // Submitted blocks, oldest first.
  std::deque<std::shared_ptr<Block>> in_order_;
  std::unique_ptr<Deflater> inline_deflater_;  // threads_ == 1

  std::mutex mu_;
  std::condition_variable work_;  // queue_ or stop_ changed
  std::condition_variable done_;  // a block is done
  std::deque<std::shared_ptr<Block>> queue_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace wds
