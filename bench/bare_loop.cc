// bare_loop: the hardware's rate for the loader's work, without the loader.
// N threads each read their shards (shards[t::N]) with libarchive and decode
// every .jpg member with TurboJPEG: no shuffle, no queues, no per-sample
// allocation once the buffers have grown.
//
// Where the decoded pixels go:
//   (default)    one reused buffer per thread, which stays in the cache: the
//                least any loader could do, but it keeps no image.
//   --batch B    image i goes to slot i % B of a batch block, and a thread
//                cycles through --blocks K blocks (default 2) of B images,
//                mapped on first use and advised for huge pages: what a
//                loader that hands out batches must do at the least (its
//                blocks are written cold and first touched once each).
//
// --resize WxH --crop center also takes the largest centred crop of the
// target's aspect ratio and area-averages it to WxH, decoding at the smallest
// DCT scale M/8 (M in 1, 2, 4; TurboJPEG scales the whole image) at which the
// crop still covers the target: the work of `wds-bench --resize WxH --crop
// center`, with the resampling weights computed once per geometry.
//
// Built and run by bench/bare_loop_vs_loader.sh; not part of the library.
//
//   bare_loop [--threads N] [--epochs E] [--batch B [--blocks K]]
//             [--resize WxH --crop center] SHARD...
//
// Prints one JSON line: images, seconds, images_per_s, minor_faults, user_s,
// sys_s (getrusage over the whole run).
#include <archive.h>
#include <archive_entry.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <turbojpeg.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Options {
  int threads = 2;
  int epochs = 1;
  int batch = 0;  // 0: one reused buffer
  int blocks = 2;
  int width = 0;  // 0: no resize
  int height = 0;
  std::vector<std::string> shards;
};

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "bare_loop: %s\n", message.c_str());
  std::exit(1);
}

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) {
      o.threads = std::atoi(argv[++i]);
    } else if (a == "--epochs" && i + 1 < argc) {
      o.epochs = std::atoi(argv[++i]);
    } else if (a == "--batch" && i + 1 < argc) {
      o.batch = std::atoi(argv[++i]);
    } else if (a == "--blocks" && i + 1 < argc) {
      o.blocks = std::atoi(argv[++i]);
    } else if (a == "--resize" && i + 1 < argc) {
      if (std::sscanf(argv[++i], "%dx%d", &o.width, &o.height) != 2) Die("--resize wants WxH");
    } else if (a == "--crop" && i + 1 < argc) {
      if (std::string(argv[++i]) != "center") Die("only --crop center is implemented");
    } else if (!a.empty() && a[0] != '-') {
      o.shards.push_back(a);
    } else {
      Die("unknown option " + a);
    }
  }
  if (o.shards.empty() || o.threads < 1 || o.epochs < 1 || o.batch < 0 || o.blocks < 1) {
    Die("usage: see bench/bare_loop.cc");
  }
  return o;
}

// AreaWeights are the area-averaging weights of one axis: output i averages
// source [first[i], first[i] + count[i]) with weight[offset[i] + k].
struct AreaWeights {
  std::vector<int> first, count, offset;
  std::vector<float> weight;

  AreaWeights(int source, int target) {
    const double scale = static_cast<double>(source) / target;
    for (int i = 0; i < target; ++i) {
      const double a = i * scale, b = a + scale;
      const int lo = static_cast<int>(a);
      const int hi = std::min(static_cast<int>(std::ceil(b)), source);
      first.push_back(lo);
      count.push_back(hi - lo);
      offset.push_back(static_cast<int>(weight.size()));
      for (int x = lo; x < hi; ++x) {
        weight.push_back(static_cast<float>((std::min<double>(b, x + 1) - std::max<double>(a, x)) /
                                            scale));
      }
    }
  }
};

// CropResize area-averages the centred crop of `rgb` (w x h) with the
// target's aspect ratio to tw x th, vertical pass first.
class CropResize {
 public:
  void Run(const unsigned char* rgb, int w, int h, int tw, int th, unsigned char* out) {
    int cw = w, ch = h;
    if (int64_t{w} * th > int64_t{h} * tw) {
      cw = static_cast<int>((int64_t{h} * tw + th / 2) / th);
    } else {
      ch = static_cast<int>((int64_t{w} * th + tw / 2) / tw);
    }
    if (!rows_ || cw != cw_ || ch != ch_ || tw != tw_ || th != th_) {
      cw_ = cw, ch_ = ch, tw_ = tw, th_ = th;
      rows_ = std::make_unique<AreaWeights>(ch, th);
      cols_ = std::make_unique<AreaWeights>(cw, tw);
    }
    const int x0 = (w - cw) / 2, y0 = (h - ch) / 2;
    const size_t row_floats = static_cast<size_t>(cw) * 3;
    line_.resize(row_floats);
    for (int j = 0; j < th; ++j) {
      std::fill(line_.begin(), line_.end(), 0.0f);
      for (int k = 0; k < rows_->count[j]; ++k) {
        const float weight = rows_->weight[rows_->offset[j] + k];
        const unsigned char* src = rgb + (static_cast<size_t>(rows_->first[j] + k + y0) * w + x0) * 3;
        for (size_t x = 0; x < row_floats; ++x) line_[x] += weight * src[x];
      }
      unsigned char* dst = out + static_cast<size_t>(j) * tw * 3;
      for (int i = 0; i < tw; ++i) {
        float acc[3] = {0, 0, 0};
        const float* weights = &cols_->weight[cols_->offset[i]];
        const float* src = &line_[static_cast<size_t>(cols_->first[i]) * 3];
        for (int k = 0; k < cols_->count[i]; ++k) {
          for (int c = 0; c < 3; ++c) acc[c] += weights[k] * src[k * 3 + c];
        }
        for (int c = 0; c < 3; ++c) {
          dst[i * 3 + c] = static_cast<unsigned char>(std::min(255.0f, acc[c] + 0.5f));
        }
      }
    }
  }

 private:
  int cw_ = 0, ch_ = 0, tw_ = 0, th_ = 0;
  std::unique_ptr<AreaWeights> rows_, cols_;
  std::vector<float> line_;
};

// Block is an anonymous mapping advised for huge pages, as the loader's pool
// blocks are: first touched by the decoder.
struct Block {
  explicit Block(size_t bytes) : size(bytes) {
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) Die("cannot map a batch block");
    madvise(p, size, MADV_HUGEPAGE);
    data = static_cast<unsigned char*>(p);
  }
  Block(Block&& o) noexcept : data(o.data), size(o.size) { o.data = nullptr; }
  Block(const Block&) = delete;
  ~Block() {
    if (data != nullptr) munmap(data, size);
  }
  unsigned char* data = nullptr;
  size_t size = 0;
};

// Output hands out where each image's pixels go: one reused buffer, or the
// next slot of a ring of batch blocks.
class Output {
 public:
  explicit Output(const Options& o) : batch_(o.batch), blocks_(o.blocks) {}

  unsigned char* Next(size_t image_bytes) {
    if (batch_ == 0) {
      if (single_.size() < image_bytes) single_.resize(image_bytes);
      return single_.data();
    }
    if (image_bytes != image_bytes_) {  // a new geometry starts a new ring
      image_bytes_ = image_bytes;
      ring_.clear();
      slot_ = 0;
    }
    const size_t block = slot_ / batch_ % blocks_;
    if (ring_.size() <= block) ring_.emplace_back(image_bytes * batch_);
    return ring_[block].data + (slot_++ % batch_) * image_bytes;
  }

 private:
  const size_t batch_;
  const size_t blocks_;
  size_t image_bytes_ = 0;
  size_t slot_ = 0;
  std::vector<unsigned char> single_;
  std::vector<Block> ring_;
};

// DctScale is the smallest M of M/8 in {1, 2, 4} at which the crop of
// (cw x ch) still covers tw x th, else 8.
int DctScale(int w, int h, int tw, int th) {
  const int cw = std::min<int64_t>(w, int64_t{h} * tw / th);
  const int ch = std::min<int64_t>(h, int64_t{w} * th / tw);
  for (int m : {1, 2, 4}) {
    if (int64_t{cw} * m >= int64_t{8} * tw && int64_t{ch} * m >= int64_t{8} * th) return m;
  }
  return 8;
}

// DecodeShards reads and decodes every JPEG of `shards` into `output`;
// returns the count.
int64_t DecodeShards(const std::vector<std::string>& shards, const Options& o, Output& output) {
  tjhandle tj = tjInitDecompress();
  std::vector<unsigned char> input, pixels;
  CropResize resize;
  int64_t images = 0;
  for (const std::string& path : shards) {
    archive* ar = archive_read_new();
    archive_read_support_format_tar(ar);
    archive_read_support_filter_all(ar);
    if (archive_read_open_filename(ar, path.c_str(), 1 << 20) != ARCHIVE_OK) Die("cannot open " + path);
    archive_entry* entry;
    while (archive_read_next_header(ar, &entry) == ARCHIVE_OK) {
      const std::string name = archive_entry_pathname(entry);
      if (name.size() < 4 || name.compare(name.size() - 4, 4, ".jpg") != 0) continue;
      input.resize(static_cast<size_t>(archive_entry_size(entry)));
      if (archive_read_data(ar, input.data(), input.size()) != static_cast<la_ssize_t>(input.size())) {
        Die("short read in " + path);
      }
      int w, h, subsamp, colorspace;
      if (tjDecompressHeader3(tj, input.data(), input.size(), &w, &h, &subsamp, &colorspace) != 0) {
        Die("bad JPEG " + name);
      }
      if (o.width > 0) {
        const int m = DctScale(w, h, o.width, o.height);
        const int sw = TJSCALED(w, (tjscalingfactor{m, 8})), sh = TJSCALED(h, (tjscalingfactor{m, 8}));
        pixels.resize(static_cast<size_t>(sw) * sh * 3);
        if (tjDecompress2(tj, input.data(), input.size(), pixels.data(), sw, 0, sh, TJPF_RGB, 0) != 0) {
          Die("decode failed " + name);
        }
        resize.Run(pixels.data(), sw, sh, o.width, o.height,
                   output.Next(static_cast<size_t>(o.width) * o.height * 3));
      } else {
        unsigned char* out = output.Next(static_cast<size_t>(w) * h * 3);
        if (tjDecompress2(tj, input.data(), input.size(), out, w, 0, h, TJPF_RGB, 0) != 0) {
          Die("decode failed " + name);
        }
      }
      ++images;
    }
    archive_read_free(ar);
  }
  tjDestroy(tj);
  return images;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = Parse(argc, argv);
  const auto start = std::chrono::steady_clock::now();
  std::atomic<int64_t> images{0};
  // Each thread keeps its output across epochs, as a loader keeps its pool.
  std::vector<Output> outputs;
  for (int t = 0; t < o.threads; ++t) outputs.emplace_back(o);
  for (int epoch = 0; epoch < o.epochs; ++epoch) {
    std::vector<std::thread> threads;
    for (int t = 0; t < o.threads; ++t) {
      threads.emplace_back([&, t] {
        std::vector<std::string> mine;
        for (size_t i = t; i < o.shards.size(); i += o.threads) mine.push_back(o.shards[i]);
        images += DecodeShards(mine, o, outputs[t]);
      });
    }
    for (std::thread& t : threads) t.join();
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  std::printf(
      "{\"images\": %lld, \"seconds\": %.6f, \"images_per_s\": %.2f, \"minor_faults\": %ld, "
      "\"user_s\": %.3f, \"sys_s\": %.3f}\n",
      static_cast<long long>(images.load()), seconds, images.load() / seconds, usage.ru_minflt,
      usage.ru_utime.tv_sec + usage.ru_utime.tv_usec * 1e-6,
      usage.ru_stime.tv_sec + usage.ru_stime.tv_usec * 1e-6);
  return 0;
}
