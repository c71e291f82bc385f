#include "tar/gzip_file_sink.h"

#include <cerrno>
#include <new>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "wds/internal/base/signals_blocked.h"
#include "wds/internal/base/strings.h"

namespace wds {
namespace {

// PutLittleEndian32 appends `value`'s 4 bytes, least significant first.
void PutLittleEndian32(std::string& out, uint32_t value) {
  for (int i = 0; i < 4; ++i) out += static_cast<char>((value >> (8 * i)) & 0xff);
}

}  // namespace

GzipFileSink::Deflater::Deflater(int level) {
  ready_ = deflateInit2(&z_, level < 0 ? Z_DEFAULT_COMPRESSION : level, Z_DEFLATED, -MAX_WBITS, 8,
                        Z_DEFAULT_STRATEGY) == Z_OK;
}

GzipFileSink::Deflater::~Deflater() {
  if (ready_) deflateEnd(&z_);
}

void GzipFileSink::Deflater::Compress(Block& block) {
  try {
    Deflate(block);
  } catch (const std::bad_alloc&) {
    block.ok = false;  // the output buffer could not grow
  }
}

void GzipFileSink::Deflater::Deflate(Block& block) {
  block.crc = static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(block.input.data()),
                                          static_cast<uInt>(block.input.size())));
  if (!ready_ || deflateReset(&z_) != Z_OK ||
      (!block.dictionary.empty() &&
       deflateSetDictionary(&z_, reinterpret_cast<const Bytef*>(block.dictionary.data()),
                            static_cast<uInt>(block.dictionary.size())) != Z_OK)) {
    block.ok = false;
    return;
  }
  const int flush = block.last ? Z_FINISH : Z_SYNC_FLUSH;
  z_.next_in = reinterpret_cast<Bytef*>(block.input.data());
  z_.avail_in = static_cast<uInt>(block.input.size());
  block.output.resize(deflateBound(&z_, block.input.size()) + 64);
  size_t have = 0;
  while (true) {
    z_.next_out = reinterpret_cast<Bytef*>(block.output.data() + have);
    z_.avail_out = static_cast<uInt>(block.output.size() - have);
    const int rc = deflate(&z_, flush);
    have = block.output.size() - z_.avail_out;
    if (rc == Z_STREAM_ERROR) {
      block.ok = false;
      return;
    }
    // A sync flush is complete once all the input is taken with room left.
    if (block.last ? rc == Z_STREAM_END : z_.avail_in == 0 && z_.avail_out > 0) break;
    block.output.resize(block.output.size() * 2);
  }
  block.output.resize(have);
}

absl::StatusOr<std::unique_ptr<GzipFileSink>> GzipFileSink::Create(const std::string& path,
                                                                   int level, int threads) {
  if (level > 9) {
    return absl::InvalidArgumentError(Cat(path, ": compression level ", level, " is out of range"));
  }
  if (absl::Status valid = CheckCompressionThreads(path, threads); !valid.ok()) return valid;
  absl::StatusOr<FileOutput> file = FileOutput::Open(path);
  if (!file.ok()) return file.status();
  return std::unique_ptr<GzipFileSink>(new GzipFileSink(*std::move(file), level, threads));
}

GzipFileSink::GzipFileSink(FileOutput file, int level, int threads)
    : file_(std::move(file)), level_(level), in_flight_(2 * static_cast<size_t>(threads) - 1) {
  filling_.reserve(kBlockSize);
  if (threads > 1) {
    try {
      const SignalsBlocked no_signals;
      workers_.reserve(static_cast<size_t>(threads));
      for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { Work(); });
      return;
    } catch (const std::system_error&) {
      // No more threads to be had (a pids limit): the writing thread
      // compresses, as with threads = 1; the bytes are the same.
      StopWorkers();
    }
  }
  inline_deflater_ = std::make_unique<Deflater>(level_);
}

GzipFileSink::~GzipFileSink() { StopWorkers(); }

void GzipFileSink::StopWorkers() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_.notify_all();
  for (std::thread& t : workers_) t.join();
  workers_.clear();
}

void GzipFileSink::Work() {
  Deflater deflater(level_);
  while (true) {
    std::shared_ptr<Block> block;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      block = std::move(queue_.front());
      queue_.pop_front();
    }
    deflater.Compress(*block);
    {
      std::lock_guard<std::mutex> lock(mu_);
      block->done = true;
    }
    done_.notify_all();
  }
}

bool GzipFileSink::Write(std::string_view data) {
  while (!data.empty()) {
    if (file_.failed()) return false;
    const size_t n = std::min(data.size(), kBlockSize - filling_.size());
    filling_.append(data.data(), n);
    data.remove_prefix(n);
    if (filling_.size() == kBlockSize && !Submit(/*last=*/false)) return false;
  }
  return !file_.failed();
}

bool GzipFileSink::Submit(bool last) {
  auto block = std::make_shared<Block>();
  block->input = std::exchange(filling_, std::string());
  filling_.reserve(kBlockSize);
  block->dictionary = tail_;
  block->last = last;
  // Every block but the last is kBlockSize long, so the next one's
  // dictionary is the end of this one.
  if (!last) tail_.assign(block->input, kBlockSize - kWindow, kWindow);
  in_order_.push_back(block);
  if (inline_deflater_ != nullptr) {
    inline_deflater_->Compress(*block);
    block->done = true;
  } else {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(block);
    }
    work_.notify_one();
  }
  while (in_order_.size() > in_flight_) {
    if (!WriteFront()) return false;
  }
  return true;
}

bool GzipFileSink::WriteFront() {
  std::shared_ptr<Block> block = std::move(in_order_.front());
  in_order_.pop_front();
  {
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [&] { return block->done; });
  }
  if (!block->ok) return file_.Fail(ENOMEM, "zlib: deflate failed");
  if (!header_written_) {
    // ID1 ID2 CM=deflate FLG=0 MTIME=0 XFL OS=Unix, as gzip -n writes.
    const char xfl = level_ == 9 ? 2 : level_ == 1 ? 4 : 0;
    const char header[10] = {'\x1f', '\x8b', 8, 0, 0, 0, 0, 0, xfl, 3};
    if (!file_.Write(std::string_view(header, sizeof(header)))) return false;
    header_written_ = true;
  }
  if (!file_.Write(block->output)) return false;
  crc_ = static_cast<uint32_t>(
      crc32_combine(crc_, block->crc, static_cast<z_off_t>(block->input.size())));
  size_ += block->input.size();
  return true;
}

bool GzipFileSink::Finish() {
  if (std::exchange(finished_, true)) return !file_.failed();
  if (file_.failed() || !Submit(/*last=*/true)) return false;
  while (!in_order_.empty()) {
    if (!WriteFront()) return false;
  }
  std::string trailer;
  PutLittleEndian32(trailer, crc_);
  PutLittleEndian32(trailer, static_cast<uint32_t>(size_));  // ISIZE: the size mod 2^32
  return file_.Write(trailer) && file_.Close();
}

}  // namespace wds
