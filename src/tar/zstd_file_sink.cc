#include "tar/zstd_file_sink.h"

#include <utility>

#include "absl/status/status.h"
#include "wds/internal/base/signals_blocked.h"
#include "wds/internal/base/strings.h"

namespace wds {

absl::StatusOr<std::unique_ptr<ZstdFileSink>> ZstdFileSink::Create(const std::string& path,
                                                                   int level, int threads) {
  // ZSTD_c_compressionLevel would clamp a level out of range silently.
  if (level > ZSTD_maxCLevel()) {
    return absl::InvalidArgumentError(Cat(path, ": compression level ", level, " is out of range"));
  }
  if (absl::Status valid = CheckCompressionThreads(path, threads); !valid.ok()) return valid;
  CCtx cctx(ZSTD_createCCtx(), ZSTD_freeCCtx);
  if (cctx == nullptr) {
    return absl::ResourceExhaustedError(Cat(path, ": cannot allocate a zstd compressor"));
  }
  // Neither call can fail: both values are in range.
  if (level >= 0) ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_compressionLevel, level);
  ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_checksumFlag, 1);
  if (threads > 1 && ZSTD_isError(ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_nbWorkers, threads))) {
    return absl::InvalidArgumentError(
        Cat(path, ": this zstd cannot compress on ", threads, " threads"));
  }
  if (threads > 1) {
    // zstd starts its threads at the first call: here, with the asynchronous
    // signals blocked, which they inherit (signals_blocked.h). No input, no
    // output: the frame is unchanged.
    const SignalsBlocked no_signals;
    char none[1];
    ZSTD_outBuffer out{none, 0, 0};
    ZSTD_inBuffer in{nullptr, 0, 0};
    const size_t started = ZSTD_compressStream2(cctx.get(), &out, &in, ZSTD_e_continue);
    if (ZSTD_isError(started)) {
      return absl::ResourceExhaustedError(
          Cat(path, ": zstd cannot start ", threads, " threads: ", ZSTD_getErrorName(started)));
    }
  }
  absl::StatusOr<FileOutput> file = FileOutput::Open(path);
  if (!file.ok()) return file.status();
  return std::unique_ptr<ZstdFileSink>(new ZstdFileSink(*std::move(file), std::move(cctx)));
}

ZstdFileSink::ZstdFileSink(FileOutput file, CCtx cctx)
    : file_(std::move(file)), cctx_(std::move(cctx)), out_(ZSTD_CStreamOutSize()) {}

bool ZstdFileSink::Write(std::string_view data) {
  ZSTD_inBuffer in{data.data(), data.size(), 0};
  return !file_.failed() && Compress(in, ZSTD_e_continue);
}

bool ZstdFileSink::Finish() {
  if (std::exchange(finished_, true)) return !file_.failed();
  ZSTD_inBuffer none{nullptr, 0, 0};
  return !file_.failed() && Compress(none, ZSTD_e_end) && file_.Close();
}

bool ZstdFileSink::Compress(ZSTD_inBuffer& in, ZSTD_EndDirective mode) {
  while (true) {
    ZSTD_outBuffer out{out_.data(), out_.size(), 0};
    const size_t left = ZSTD_compressStream2(cctx_.get(), &out, &in, mode);
    if (ZSTD_isError(left)) return file_.Fail(0, Cat("zstd: ", ZSTD_getErrorName(left)));
    if (!file_.Write(std::string_view(out_.data(), out.pos))) return false;
    // ZSTD_e_end reports what it still holds of the frame; ZSTD_e_continue
    // is done once it has taken all the input (it keeps a partial block).
    if (mode == ZSTD_e_end ? left == 0 : in.pos == in.size) return true;
  }
}

}  // namespace wds
