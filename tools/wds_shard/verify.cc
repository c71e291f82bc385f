// wds-shard verify: check shards before a long training run.
//
// Per shard: the tar structure (the whole stream is read: truncation, corrupt
// compression and a missing end-of-archive block are found), WebDataset
// grouping (a field twice in one sample, a key whose members are split by
// another sample, members with no field, samples missing a field that more
// than half of the shard's samples have), with --decode every image field
// (jpg, jpeg, png, webp) decoded, and, when SHARD.idx exists, that the index
// matches the shard, member by member. Each problem is one line on standard
// output, "<shard>: <what> (key, offset)"; a clean shard prints "<shard>: ok
// (N samples)". Exit status 1 if any shard has a problem.
//
//   wds-shard verify [--decode] [--jobs N] SHARD...
//
// Shards are checked N at a time (at most 256; default 16 when a shard is
// remote, else the number of cores up to 8); each shard's lines come out
// together, in the order the shards were given, as soon as every shard
// before it is done.
#include <sys/stat.h>

#include <exception>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/strip.h"
#include "commands.h"
#include "common.h"
#include "wds/decode/decode.h"
#include "wds/image/image.h"
#include "wds/internal/base/concurrently.h"
#include "wds/internal/tar/tar_grouping.h"
#include "wds/shards/shard_list.h"
#include "wds/tar/shard_index.h"

namespace wds::tools {
namespace {

// Past this many, a shard's problems are counted, not printed.
constexpr int64_t kMaxPrinted = 50;

// Report collects one shard's lines.
class Report {
 public:
  explicit Report(std::string url) : url_(std::move(url)) {}
  void Problem(const std::string& what) {
    if (count_++ < kMaxPrinted) text_ += url_ + ": " + what + "\n";
  }
  // Finish adds the closing line.
  void Finish(int64_t samples) {
    if (count_ == 0) {
      text_ += url_ + ": ok (" + std::to_string(samples) + " samples)\n";
    } else if (count_ > kMaxPrinted) {
      text_ += url_ + ": ... and " + std::to_string(count_ - kMaxPrinted) + " more problem(s)\n";
    }
  }
  int64_t count() const { return count_; }
  std::string& text() { return text_; }

 private:
  std::string url_;
  std::string text_;
  int64_t count_ = 0;
};

std::string At(const std::string& key, int64_t offset) {
  return "key '" + key + "' at offset " + std::to_string(offset);
}

// SampleFields remembers what the missing-field check needs of a sample.
struct SampleFields {
  std::string key;
  int64_t offset;
  std::set<std::string> fields;
};

class ShardChecker {
 public:
  ShardChecker(const std::string& url, bool decode, Report& report)
      : url_(url), decode_(decode), report_(report), rng_(0) {}

  int64_t Run() {
    ShardVisitor visitor;
    visitor.on_skipped = [&](const TarMember& m) {
      if (!IsMetadataName(m.name)) {
        report_.Problem("member " + m.name + " at offset " + std::to_string(m.offset) +
                        " has no field (no dot in its file name): readers skip it");
      }
      return true;
    };
    visitor.on_sample = [&](RawSample& sample) {
      CheckSample(sample);
      return true;
    };
    absl::Status walked = WalkShard(url_, visitor);
    if (!walked.ok()) {
      // The reader's error names the shard, as the report's lines do.
      absl::string_view what = walked.message();
      absl::ConsumePrefix(&what, url_ + ": ");
      report_.Problem(std::string(what));
    }
    if (walked.ok() && samples_.empty()) report_.Problem("no samples");
    CheckMissingFields();
    if (walked.ok()) CheckIndex();
    return static_cast<int64_t>(samples_.size());
  }

 private:
  void CheckSample(const RawSample& sample) {
    SampleFields seen{sample.key, sample.offset(), {}};
    for (const ShardMember& m : sample.members) {
      if (m.field.empty()) {
        report_.Problem(At(sample.key, m.offset) + ": member " + m.name + " has an empty field");
      } else if (!seen.fields.insert(m.field).second) {
        report_.Problem(At(sample.key, m.offset) + ": duplicate field '" + m.field + "' (member " +
                        m.name + ")");
      }
      if (decode_) Decode(sample.key, m);
    }
    auto [first, inserted] = first_offsets_.emplace(sample.key, sample.offset());
    if (!inserted) {
      report_.Problem(At(sample.key, sample.offset()) +
                      ": the key's members are split: it also starts a sample at offset " +
                      std::to_string(first->second) + ", with other samples between");
    }
    samples_.push_back(std::move(seen));
  }

  void Decode(const std::string& key, const ShardMember& m) {
    if (!IsImageExtension(FieldExtension(m.field))) return;
    static const ImageSpec kSpec = *ParseImageSpec("rgb8");
    absl::StatusOr<Array> image = DecodeImage(m.data.view(), kSpec, ImageDecodeOptions(), rng_);
    if (!image.ok()) {
      report_.Problem(At(key, m.offset) + ": field '" + m.field +
                      "' does not decode: " + std::string(image.status().message()));
    }
  }

  void CheckMissingFields() {
    std::map<std::string, int64_t> counts;
    for (const SampleFields& s : samples_) {
      for (const std::string& f : s.fields) ++counts[f];
    }
    const int64_t n = static_cast<int64_t>(samples_.size());
    for (const auto& [field, count] : counts) {
      if (count == n || 2 * count <= n) continue;
      for (const SampleFields& s : samples_) {
        if (s.fields.count(field) == 0) {
          report_.Problem(At(s.key, s.offset) + ": missing field '" + field + "' (present in " +
                          std::to_string(count) + " of " + std::to_string(n) + " samples)");
        }
      }
    }
  }

  void CheckIndex() {
    const std::string path = IndexPath(url_);
    struct stat st;
    if (stat(path.c_str(), &st) != 0) return;
    absl::StatusOr<ShardIndex> index = ShardIndex::Load(path);
    if (!index.ok()) {
      report_.Problem("index: " + std::string(index.status().message()));
      return;
    }
    absl::StatusOr<ShardIndex> actual = ScanShard(url_);
    if (!actual.ok()) {
      report_.Problem("index: cannot scan the shard: " + std::string(actual.status().message()));
      return;
    }
    CompareIndex(path, *index, *actual);
  }

  void CompareIndex(const std::string& path, const ShardIndex& index, const ShardIndex& actual) {
    if (index.samples.size() != actual.samples.size()) {
      report_.Problem("index " + path + " lists " + std::to_string(index.samples.size()) +
                      " samples, the shard has " + std::to_string(actual.samples.size()));
      return;
    }
    for (size_t i = 0; i < index.samples.size(); ++i) {
      const std::vector<IndexMember>& want = actual.samples[i].members;
      const std::vector<IndexMember>& got = index.samples[i].members;
      for (size_t j = 0; j < std::max(want.size(), got.size()); ++j) {
        // A v1.1 index has no names: compare the rest.
        const bool same = j < want.size() && j < got.size() && want[j].field == got[j].field &&
                          want[j].offset == got[j].offset && want[j].size == got[j].size &&
                          (got[j].name.empty() || got[j].name == want[j].name);
        if (same) continue;
        const std::string expected =
            j < want.size() ? want[j].field + " " + std::to_string(want[j].offset) + " " +
                                  std::to_string(want[j].size) + " " + want[j].name
                            : "nothing";
        report_.Problem("index " + path + " line " + std::to_string(i + 2) + " member " +
                        std::to_string(j + 1) + " does not match the shard, which has " + expected);
        return;
      }
    }
  }

  const std::string& url_;
  const bool decode_;
  Report& report_;
  Rng rng_;
  std::vector<SampleFields> samples_;
  std::map<std::string, int64_t> first_offsets_;
};

}  // namespace

int RunVerify(int argc, char** argv) {
  Args args(argc, argv);
  bool decode = false;
  int jobs = 0;  // 0: the default
  std::vector<std::string> urls;
  while (!args.done()) {
    const std::string_view arg = args.Take();
    if (arg == "--decode") {
      decode = true;
    } else if (arg == "--jobs") {
      absl::StatusOr<int> n = args.Jobs("verify");
      if (!n.ok()) return Fail(n.status());
      jobs = *n;
    } else if (IsOption(arg)) {
      return Fail("verify: unknown option " + std::string(arg));
    } else {
      absl::StatusOr<std::vector<std::string>> expanded = ExpandUrls(arg);
      if (!expanded.ok()) return Fail("verify: " + std::string(expanded.status().message()));
      urls.insert(urls.end(), expanded->begin(), expanded->end());
    }
  }
  if (urls.empty()) return Fail("usage: wds-shard verify [--decode] [--jobs N] SHARD...");
  struct Checked {
    std::string text;  // the shard's lines
    int64_t problems;
  };
  auto check = [&](const std::string& url) -> absl::StatusOr<Checked> {
    Report report(url);
    try {
      report.Finish(ShardChecker(url, decode, report).Run());
    } catch (const std::exception& e) {  // out of memory, most likely: the next shards go on
      report.Problem(std::string("cannot be checked: ") + e.what());
      report.Finish(0);
    }
    return Checked{std::move(report.text()), report.count()};
  };
  int64_t problems = 0, bad_shards = 0;
  ReadEachInOrder<Checked>(urls, jobs > 0 ? jobs : DefaultJobs(urls, CpuJobs()), check,
                           [&](size_t i, absl::StatusOr<Checked>& checked) {
                             if (!checked.ok()) {  // from Report itself: no later shard is read
                               checked = Checked{urls[i] + ": cannot be checked: " +
                                                     std::string(checked.status().message()) + "\n",
                                                 1};
                             }
                             std::fwrite(checked->text.data(), 1, checked->text.size(), stdout);
                             std::fflush(stdout);
                             problems += checked->problems;
                             bad_shards += checked->problems > 0 ? 1 : 0;
                           });
  if (problems == 0) return 0;
  return Fail("verify: " + std::to_string(problems) + " problem(s) in " +
              std::to_string(bad_shards) + " of " + std::to_string(urls.size()) + " shard(s)");
}

}  // namespace wds::tools
