// wds-fashion-mnist: converts an IDX image/label pair (MNIST, Fashion-MNIST;
// gzip-compressed or not) into a tar stream of WebDataset samples on standard
// output, for `wds-shard create -` to cut into shards:
//
//   wds-fashion-mnist train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz |
//       wds-shard create --output out/train-%06d.tar --maxcount 10000 -
//
// Sample i has key "<prefix><i, six digits>", "png" (8-bit grayscale PNG,
// libspng) and "cls" (the label in decimal). The output is reproducible.
#include <spng.h>
#include <zlib.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "wds/tar/tar_writer.h"

namespace {

constexpr uint32_t kLabelsMagic = 0x00000801;
constexpr uint32_t kImagesMagic = 0x00000803;
// Far above any IDX data set, far below what would exhaust memory.
constexpr uint64_t kMaxBytes = uint64_t{1} << 32;

int Fail(const std::string& message) {
  std::fprintf(stderr, "wds-fashion-mnist: %s\n", message.c_str());
  return 1;
}

// ReadGz reads a whole file, inflating it if it is gzip-compressed.
absl::StatusOr<std::string> ReadGz(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) return absl::NotFoundError(path + ": cannot open: " + std::strerror(errno));
  std::string data;
  char chunk[1 << 16];
  int n;
  while ((n = gzread(f, chunk, sizeof(chunk))) > 0 && data.size() < kMaxBytes)
    data.append(chunk, n);
  int error = Z_OK;
  const char* message = gzerror(f, &error);
  gzclose(f);
  if (n < 0 || (error != Z_OK && error != Z_BUF_ERROR)) {
    return absl::DataLossError(path + ": cannot read: " + message);
  }
  return data;
}

uint32_t BigEndian32(std::string_view data, size_t offset) {
  const auto* p = reinterpret_cast<const unsigned char*>(data.data() + offset);
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | uint32_t{p[3]};
}

struct Idx {
  std::string data;
  std::vector<uint32_t> dims;
  size_t header = 0;
};

// ParseIdx checks an IDX file's magic number, dimensions and length.
absl::StatusOr<Idx> ParseIdx(const std::string& path, uint32_t magic) {
  absl::StatusOr<std::string> data = ReadGz(path);
  if (!data.ok()) return data.status();
  Idx idx;
  idx.data = *std::move(data);
  const size_t rank = magic & 0xff;
  idx.header = 4 + 4 * rank;
  if (idx.data.size() < idx.header || BigEndian32(idx.data, 0) != magic) {
    return absl::InvalidArgumentError(path + ": not an IDX file of unsigned bytes with " +
                                      std::to_string(rank) + " dimension(s)");
  }
  uint64_t expected = 1;
  for (size_t i = 0; i < rank; ++i) {
    idx.dims.push_back(BigEndian32(idx.data, 4 + 4 * i));
    expected *= idx.dims.back();
  }
  if (idx.data.size() - idx.header != expected) {
    return absl::DataLossError(path + ": holds " + std::to_string(idx.data.size() - idx.header) +
                               " data bytes, its header announces " + std::to_string(expected));
  }
  return idx;
}

absl::StatusOr<std::string> EncodeGrayPng(const unsigned char* pixels, uint32_t width,
                                          uint32_t height) {
  std::unique_ptr<spng_ctx, void (*)(spng_ctx*)> ctx(spng_ctx_new(SPNG_CTX_ENCODER), spng_ctx_free);
  if (ctx == nullptr) return absl::ResourceExhaustedError("spng_ctx_new failed");
  spng_ihdr ihdr = {};
  ihdr.width = width;
  ihdr.height = height;
  ihdr.bit_depth = 8;
  ihdr.color_type = SPNG_COLOR_TYPE_GRAYSCALE;
  int rc = spng_set_option(ctx.get(), SPNG_ENCODE_TO_BUFFER, 1);
  if (rc == 0) rc = spng_set_ihdr(ctx.get(), &ihdr);
  if (rc == 0) {
    rc = spng_encode_image(ctx.get(), pixels, size_t{width} * height, SPNG_FMT_PNG,
                           SPNG_ENCODE_FINALIZE);
  }
  if (rc != 0) return absl::InternalError(std::string("PNG encoding: ") + spng_strerror(rc));
  size_t size = 0;
  void* png = spng_get_png_buffer(ctx.get(), &size, &rc);
  if (png == nullptr) return absl::InternalError(std::string("PNG encoding: ") + spng_strerror(rc));
  std::string out(static_cast<const char*>(png), size);
  std::free(png);
  return out;
}

std::string Key(const std::string& prefix, size_t i) {
  char digits[24];
  std::snprintf(digits, sizeof(digits), "%06zu", i);
  return prefix + digits;
}

absl::Status Convert(const std::string& images_path, const std::string& labels_path,
                     const std::string& prefix) {
  absl::StatusOr<Idx> images = ParseIdx(images_path, kImagesMagic);
  if (!images.ok()) return images.status();
  absl::StatusOr<Idx> labels = ParseIdx(labels_path, kLabelsMagic);
  if (!labels.ok()) return labels.status();
  const uint32_t n = images->dims[0], rows = images->dims[1], cols = images->dims[2];
  if (labels->dims[0] != n) {
    return absl::InvalidArgumentError(labels_path + " has " + std::to_string(labels->dims[0]) +
                                      " labels for " + std::to_string(n) + " images");
  }
  absl::StatusOr<std::unique_ptr<wds::TarWriter>> tar = wds::TarWriter::Create("-");
  if (!tar.ok()) return tar.status();
  const size_t pixels = size_t{rows} * cols;
  for (size_t i = 0; i < n; ++i) {
    const auto* image =
        reinterpret_cast<const unsigned char*>(images->data.data() + images->header + i * pixels);
    absl::StatusOr<std::string> png = EncodeGrayPng(image, cols, rows);
    if (!png.ok()) return png.status();
    wds::Sample sample;
    sample.Set("__key__", Key(prefix, i));
    sample.Set("png", wds::Buffer::Copy(*png));
    sample.Set("cls", int64_t{static_cast<unsigned char>(labels->data[labels->header + i])});
    if (absl::Status s = (*tar)->Write(sample); !s.ok()) return s;
  }
  return (*tar)->Close();
}

}  // namespace

int main(int argc, char** argv) {
  std::string prefix;
  std::vector<std::string> paths;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--key-prefix" && i + 1 < argc) {
      prefix = argv[++i];
    } else if (arg.size() > 1 && arg[0] == '-') {
      paths.clear();
      break;
    } else {
      paths.emplace_back(arg);
    }
  }
  if (paths.size() != 2) {
    return Fail(
        "usage: wds-fashion-mnist [--key-prefix P] IMAGES-idx3-ubyte[.gz] "
        "LABELS-idx1-ubyte[.gz] > samples.tar");
  }
  absl::Status status = Convert(paths[0], paths[1], prefix);
  return status.ok() ? 0 : Fail(std::string(status.message()));
}
