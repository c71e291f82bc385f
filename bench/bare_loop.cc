// bare_loop: the hardware's rate for the loader's work, without the loader.
// N threads each read their shards (shards[t::N]) with libarchive and decode
// every .jpg member with TurboJPEG into one reused buffer: no shuffle, no
// batching, no per-sample allocation once the buffers have grown. With
// --resize WxH --crop center it also takes the largest centred crop of the
// target's aspect ratio and area-averages it to WxH (a plain separable box
// filter over float rows), the work of `wds-bench --resize WxH --crop center`.
//
// Built and run by bench/bare_loop_vs_loader.sh; not part of the library.
//
//   bare_loop [--threads N] [--epochs E] [--resize WxH --crop center] SHARD...
//
// Prints one JSON line: images, seconds, images_per_s, minor_faults, user_s,
// sys_s (getrusage over the whole run).
#include <archive.h>
#include <archive_entry.h>
#include <sys/resource.h>
#include <turbojpeg.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Options {
  int threads = 2;
  int epochs = 1;
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
  if (o.shards.empty() || o.threads < 1 || o.epochs < 1) Die("usage: see bench/bare_loop.cc");
  return o;
}

// BoxResize area-averages the centred crop of `rgb` (w x h) with the target's
// aspect ratio into out (tw x th), one axis at a time.
class BoxResize {
 public:
  void Run(const unsigned char* rgb, int w, int h, int tw, int th, std::vector<unsigned char>& out) {
    int cw = w, ch = h;
    if (int64_t{w} * th > int64_t{h} * tw) {
      cw = static_cast<int>((int64_t{h} * tw + th / 2) / th);
    } else {
      ch = static_cast<int>((int64_t{w} * th + tw / 2) / tw);
    }
    const int x0 = (w - cw) / 2, y0 = (h - ch) / 2;
    rows_.assign(static_cast<size_t>(th) * cw * 3, 0.0f);
    const double sy = static_cast<double>(ch) / th;
    for (int j = 0; j < th; ++j) {  // vertical pass: area average of source rows
      const double a = j * sy, b = a + sy;
      float* dst = &rows_[static_cast<size_t>(j) * cw * 3];
      for (int y = static_cast<int>(a); y < std::min(static_cast<int>(std::ceil(b)), ch); ++y) {
        const float weight = static_cast<float>((std::min<double>(b, y + 1) - std::max<double>(a, y)) / sy);
        const unsigned char* src = rgb + (static_cast<size_t>(y + y0) * w + x0) * 3;
        for (int k = 0; k < cw * 3; ++k) dst[k] += weight * src[k];
      }
    }
    out.resize(static_cast<size_t>(tw) * th * 3);
    const double sx = static_cast<double>(cw) / tw;
    for (int j = 0; j < th; ++j) {  // horizontal pass
      const float* src = &rows_[static_cast<size_t>(j) * cw * 3];
      for (int i = 0; i < tw; ++i) {
        const double a = i * sx, b = a + sx;
        float acc[3] = {0, 0, 0};
        for (int x = static_cast<int>(a); x < std::min(static_cast<int>(std::ceil(b)), cw); ++x) {
          const float weight = static_cast<float>((std::min<double>(b, x + 1) - std::max<double>(a, x)) / sx);
          for (int c = 0; c < 3; ++c) acc[c] += weight * src[x * 3 + c];
        }
        for (int c = 0; c < 3; ++c) {
          out[(static_cast<size_t>(j) * tw + i) * 3 + c] =
              static_cast<unsigned char>(std::min(255.0f, acc[c] + 0.5f));
        }
      }
    }
  }

 private:
  std::vector<float> rows_;
};

// DecodeShards reads and decodes every JPEG of `shards`; returns the count.
int64_t DecodeShards(const std::vector<std::string>& shards, const Options& o) {
  tjhandle tj = tjInitDecompress();
  std::vector<unsigned char> input, pixels, resized;
  BoxResize resize;
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
      pixels.resize(static_cast<size_t>(w) * h * 3);
      if (tjDecompress2(tj, input.data(), input.size(), pixels.data(), w, 0, h, TJPF_RGB, 0) != 0) {
        Die("decode failed " + name);
      }
      if (o.width > 0) resize.Run(pixels.data(), w, h, o.width, o.height, resized);
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
  for (int epoch = 0; epoch < o.epochs; ++epoch) {
    std::vector<std::thread> threads;
    for (int t = 0; t < o.threads; ++t) {
      threads.emplace_back([&, t] {
        std::vector<std::string> mine;
        for (size_t i = t; i < o.shards.size(); i += o.threads) mine.push_back(o.shards[i]);
        images += DecodeShards(mine, o);
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
