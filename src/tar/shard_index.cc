// Shard indexes: header-only tar scans, DALI's text index, wids' JSON index.
#include "wds/tar/shard_index.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "tar/index_lookup.h"
#include "wds/internal/base/status_macros.h"
#include "wds/internal/base/strings.h"
#include "wds/internal/io/atomic_file.h"
#include "wds/internal/io/directories.h"
#include "wds/internal/tar/shard_scan.h"
#include "wds/internal/tar/tar_grouping.h"
#include "wds/io/byte_stream.h"
#include "wds/io/remote.h"

namespace wds {
namespace {

constexpr std::string_view kDaliVersion = "v1.2";
constexpr std::string_view kWidsKind = "wids-shard-index-v1";
// kMaxSidecarBytes bounds a remote sidecar read into memory (a DALI index of
// a million samples with names is ~60 MB).
constexpr size_t kMaxSidecarBytes = size_t{256} << 20;
// kMaxDatasetIndexBytes bounds a dataset index read from a stream (one of a
// million shards is ~90 MB).
constexpr size_t kMaxDatasetIndexBytes = size_t{1} << 30;

// CountingStream adds up the bytes its stream delivers or skips.
class CountingStream : public ByteStream {
 public:
  CountingStream(std::unique_ptr<ByteStream> stream, int64_t* bytes)
      : stream_(std::move(stream)), bytes_(bytes) {}
  absl::StatusOr<size_t> Read(void* buffer, size_t size) override {
    absl::StatusOr<size_t> n = stream_->Read(buffer, size);
    if (n.ok()) *bytes_ += static_cast<int64_t>(*n);
    return n;
  }
  absl::StatusOr<int64_t> Skip(int64_t size) override {
    absl::StatusOr<int64_t> n = stream_->Skip(size);
    if (n.ok()) *bytes_ += *n;
    return n;
  }
  absl::Status Finish() override { return stream_->Finish(); }
  const std::string& url() const override { return stream_->url(); }

 private:
  std::unique_ptr<ByteStream> stream_;
  int64_t* bytes_;
};

// ToIndexSample keeps what an index records of a grouped sample.
IndexSample ToIndexSample(const GroupedSample& grouped) {
  IndexSample sample;
  sample.members.reserve(grouped.members.size());
  for (const SampleMember& m : grouped.members) {
    sample.members.push_back({m.field, m.member.data_offset, m.member.size, m.member.name});
  }
  return sample;
}

// The C escapes of GNU tar's "escape" quoting, and the bytes they stand for.
constexpr std::string_view kEscapeLetters = "\\abfnrtv";
constexpr std::string_view kEscapedBytes = "\\\a\b\f\n\r\t\v";

// TarListEscaped is `text` as GNU tar's --list prints it in a UTF-8 locale
// (its "escape" quoting): a backslash doubled, control characters escaped.
std::string TarListEscaped(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (const size_t k = kEscapedBytes.find(c); k != std::string_view::npos) {
      out += {'\\', kEscapeLetters[k]};
    } else if (byte < 0x20 || byte == 0x7f) {
      out += {'\\', static_cast<char>('0' + (byte >> 6)), static_cast<char>('0' + (byte >> 3 & 7)),
              static_cast<char>('0' + (byte & 7))};
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// TarListUnescaped undoes TarListEscaped, and the octal escapes of other
// bytes (tar in the C locale escapes every byte from 0x80). A backslash
// before anything else is kept as it is.
std::string TarListUnescaped(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  auto octal = [](char c) { return c >= '0' && c <= '7'; };
  for (size_t i = 0; i < text.size(); ++i) {
    const size_t k = i + 1 < text.size() && text[i] == '\\' ? kEscapeLetters.find(text[i + 1])
                                                            : std::string_view::npos;
    if (k != std::string_view::npos) {
      out.push_back(kEscapedBytes[k]);
      ++i;
    } else if (text[i] == '\\' && i + 3 < text.size() && text[i + 1] <= '3' && octal(text[i + 1]) &&
               octal(text[i + 2]) && octal(text[i + 3])) {
      out.push_back(static_cast<char>((text[i + 1] - '0') << 6 | (text[i + 2] - '0') << 3 |
                                      (text[i + 3] - '0')));
      i += 3;
    } else {
      out.push_back(text[i]);
    }
  }
  return out;
}

absl::Status ParseError(std::string_view source, int64_t line, std::string_view what) {
  return absl::InvalidArgumentError(Cat(source, ": line ", line, ": ", what));
}

absl::Status ParseSampleLine(const std::string& line, bool with_names, std::string_view source,
                             int64_t line_number, IndexSample& sample) {
  std::istringstream in(line);
  IndexMember m;
  while (in >> m.field) {
    if (!(in >> m.offset >> m.size) || (with_names && !(in >> m.name))) {
      return ParseError(source, line_number,
                        with_names ? "expected <ext> <offset> <size> <name> per member"
                                   : "expected <ext> <offset> <size> per member");
    }
    if (m.offset < 0 || m.size < 0 || m.offset % 512 != 0) {
      return ParseError(
          source, line_number,
          Cat("member ", m.field, ": offset ", m.offset, " is not a non-negative multiple of 512"));
    }
    m.field = TarListUnescaped(m.field);
    m.name = TarListUnescaped(m.name);
    sample.members.push_back(m);
  }
  if (sample.members.empty()) return ParseError(source, line_number, "sample has no members");
  return absl::OkStatus();
}

// ParseHeader reads "v1.x <num_samples>"; returns whether names follow each
// member (v1.2).
absl::StatusOr<bool> ParseHeader(const std::string& line, std::string_view source,
                                 int64_t* num_samples) {
  std::istringstream in(line);
  std::string version;
  if (!(in >> version) || (version != "v1.1" && version != kDaliVersion)) {
    // Quoted in part: a file that is no index may have no line breaks.
    constexpr size_t kQuoted = 32;
    if (version.size() > kQuoted) version = Cat(version.substr(0, kQuoted), "...");
    return ParseError(
        source, 1,
        Cat("not a DALI webdataset index (version '", version, "', expected v1.1 or v1.2)"));
  }
  if (!(in >> *num_samples) || *num_samples < 0) {
    return ParseError(source, 1, "no sample count");
  }
  return version == kDaliVersion;
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(Cat(path, ": cannot open"));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return absl::DataLossError(Cat(path, ": read error"));
  return text.str();
}

bool IsRelativeUrl(std::string_view url) {
  return !url.empty() && url[0] != '/' && url.find(':') == std::string_view::npos;
}

// JoinRelative joins the relative URL `relative` to the directory `base` (a
// local directory, or a remote URL's, as UrlDirectory gives it), resolving
// its "." and ".." segments as the reference's wids merges URLs (lexically,
// as os.path.normpath): "s3://b/train" and "../other/s.tar" give
// "s3://b/other/s.tar". A ".." never climbs above a remote URL's host or a
// local absolute path's root.
std::string JoinRelative(std::string_view base, std::string_view relative) {
  std::string_view root;  // "scheme://host" of a remote base
  const size_t scheme = base.find("://");
  if (scheme != std::string_view::npos) {
    root = base.substr(0, std::min(base.find('/', scheme + 3), base.size()));
    base.remove_prefix(root.size());
  }
  const bool absolute = !root.empty() || StartsWith(base, "/");
  std::vector<std::string_view> segments;
  auto add = [&](std::string_view path) {
    while (!path.empty()) {
      const size_t slash = std::min(path.find('/'), path.size());
      const std::string_view s = path.substr(0, slash);
      path.remove_prefix(std::min(slash + 1, path.size()));
      if (s.empty() || s == ".") continue;
      if (s != "..") {
        segments.push_back(s);
      } else if (!segments.empty() && segments.back() != "..") {
        segments.pop_back();
      } else if (!absolute) {
        segments.push_back(s);
      }
    }
  };
  add(base);
  add(relative);
  std::string joined(root);
  for (size_t i = 0; i < segments.size(); ++i) {
    if (i > 0 || absolute) joined += '/';
    joined += segments[i];
  }
  return joined;
}

absl::StatusOr<DatasetShard> ParseShard(const nlohmann::json& item, std::string_view source,
                                        std::string_view base_dir, size_t i) {
  if (!item.is_object() || !item.contains("url") || !item["url"].is_string() ||
      !item.contains("nsamples") || !item["nsamples"].is_number_integer()) {
    return absl::InvalidArgumentError(
        Cat(source, ": shardlist[", i, "] needs a string \"url\" and an integer \"nsamples\""));
  }
  DatasetShard shard;
  shard.url = item["url"].get<std::string>();
  if (!base_dir.empty() && IsRelativeUrl(shard.url)) shard.url = JoinRelative(base_dir, shard.url);
  shard.nsamples = item["nsamples"].get<int64_t>();
  if (item.contains("filesize") && item["filesize"].is_number_integer()) {
    shard.filesize = item["filesize"].get<int64_t>();
  }
  return shard;
}

// ReadText reads all of `stream` (at most `max_bytes`, else ResourceExhausted
// naming it as `what`) and finishes it. `started`, when not null, says
// whether any byte arrived (also when it fails).
absl::StatusOr<std::string> ReadText(ByteStream& stream, size_t max_bytes, std::string_view what,
                                     bool* started = nullptr) {
  std::string text;
  char buffer[64 << 10];
  while (true) {
    WDS_ASSIGN_OR_RETURN(size_t n, stream.Read(buffer, sizeof(buffer)));
    if (n == 0) break;
    if (started != nullptr) *started = true;
    if (text.size() + n > max_bytes) {
      return absl::ResourceExhaustedError(
          Cat(stream.url(), ": ", what, " larger than ", max_bytes, " bytes"));
    }
    text.append(buffer, n);
  }
  WDS_RETURN_IF_ERROR(stream.Finish());
  return text;
}

// UrlDirectory is what relative shard URLs of a dataset index at `url` are
// joined to: a local file's directory; for a remote URL, the URL up to the
// last '/' of its path (query and fragment dropped), "scheme://host" at
// least; "" (nothing joined) for standard input and pipe: commands.
std::string UrlDirectory(std::string_view url) {
  if (std::optional<std::string> path = LocalPath(url); path.has_value()) {
    return std::string(ParentDirectory(*path));
  }
  if (!IsRemoteUrl(url)) return "";
  url = url.substr(0, url.find_first_of("?#"));
  const size_t authority = url.find("://") + 3;
  if (url.find('/', authority) == std::string_view::npos) return std::string(url);
  return std::string(url.substr(0, url.rfind('/')));
}

}  // namespace

std::string SidecarUrl(std::string_view url) {
  const size_t query = IsRemoteUrl(url) ? url.find_first_of("?#") : std::string_view::npos;
  if (query == std::string_view::npos) return IndexPath(url);
  return Cat(url.substr(0, query), ".idx", url.substr(query));
}

absl::StatusOr<std::optional<ShardIndex>> RemoteSidecar(std::string_view url,
                                                        const Opener& opener) {
  const std::string sidecar = SidecarUrl(url);
  // S3 answers a missing key with 403 to a reader without list rights; a
  // remote stream's first Read is where its answer's status arrives.
  auto absent = [](const absl::Status& status) {
    return absl::IsNotFound(status) || absl::IsPermissionDenied(status);
  };
  absl::StatusOr<std::unique_ptr<ByteStream>> stream = opener(sidecar);
  if (!stream.ok()) {
    if (absent(stream.status())) return std::nullopt;
    return stream.status();
  }
  bool started = false;
  absl::StatusOr<std::string> text =
      ReadText(**stream, kMaxSidecarBytes, "an index sidecar", &started);
  if (!text.ok()) {
    if (!started && absent(text.status())) return std::nullopt;
    return text.status();
  }
  WDS_ASSIGN_OR_RETURN(ShardIndex index, ShardIndex::Parse(*text, sidecar));
  return index;
}

absl::StatusOr<std::string> ShardIndex::ToText() const {
  std::string out = Cat(kDaliVersion, " ", static_cast<int64_t>(samples.size()), "\n");
  for (const IndexSample& sample : samples) {
    const char* sep = "";
    for (const IndexMember& m : sample.members) {
      if (m.name.find(' ') != std::string::npos || m.field.find(' ') != std::string::npos) {
        return absl::InvalidArgumentError(
            Cat("member '", m.name, "' holds a space, which a DALI index cannot carry"));
      }
      out.append(Cat(sep, TarListEscaped(m.field), " ", m.offset, " ", m.size, " ",
                     TarListEscaped(m.name)));
      sep = " ";
    }
    out.push_back('\n');
  }
  return out;
}

absl::StatusOr<ShardIndex> ShardIndex::Parse(std::string_view text, std::string_view source) {
  std::istringstream in{std::string(text)};
  std::string line;
  int64_t num_samples = 0;
  std::getline(in, line);
  WDS_ASSIGN_OR_RETURN(const bool with_names, ParseHeader(line, source, &num_samples));
  ShardIndex index;
  for (int64_t i = 0; i < num_samples; ++i) {
    if (!std::getline(in, line)) {
      return ParseError(source, i + 2,
                        Cat("the header announces ", num_samples, " samples, found ", i));
    }
    IndexSample sample;
    WDS_RETURN_IF_ERROR(ParseSampleLine(line, with_names, source, i + 2, sample));
    index.samples.push_back(std::move(sample));
  }
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") != std::string::npos) {
      return ParseError(source, num_samples + 2,
                        Cat("more samples than the ", num_samples, " the header announces"));
    }
  }
  return index;
}

absl::StatusOr<ShardIndex> ShardIndex::Load(const std::string& path) {
  WDS_ASSIGN_OR_RETURN(std::string text, ReadWholeFile(path));
  return Parse(text, path);
}

absl::Status ShardIndex::Save(const std::string& path) const {
  absl::StatusOr<std::string> text = ToText();
  if (!text.ok()) {
    return absl::InvalidArgumentError(Cat(path, ": ", ToStd(text.status().message())));
  }
  return WriteFileAtomically(path, *text);
}

std::string IndexPath(std::string_view shard) { return Cat(shard, ".idx"); }

absl::StatusOr<ShardIndex> ScanShard(std::string_view url) {
  WDS_ASSIGN_OR_RETURN(std::unique_ptr<ByteStream> stream, OpenUrl(url));
  return ScanStream(std::move(stream));
}

absl::StatusOr<ShardIndex> ScanStream(std::unique_ptr<ByteStream> stream, int64_t* stream_bytes) {
  if (stream_bytes != nullptr) {
    *stream_bytes = 0;
    stream = std::make_unique<CountingStream>(std::move(stream), stream_bytes);
  }
  ShardSampleReaderOptions options;
  options.tar.read_data = false;
  WDS_ASSIGN_OR_RETURN(std::unique_ptr<ShardSampleReader> reader,
                       ShardSampleReader::Open(std::move(stream), std::move(options)));
  ShardIndex index;
  while (true) {
    WDS_ASSIGN_OR_RETURN(std::optional<GroupedSample> sample, reader->Next());
    if (!sample.has_value()) return index;
    index.samples.push_back(ToIndexSample(*sample));
  }
}

bool HasSidecar(std::string_view url) {
  std::optional<std::string> path = LocalPath(url);
  return path.has_value() && std::ifstream(IndexPath(*path)).good();
}

absl::StatusOr<ShardIndex> IndexOf(std::string_view url, const Opener& opener) {
  if (std::optional<std::string> path = LocalPath(url); path.has_value()) {
    const std::string sidecar = IndexPath(*path);
    if (std::ifstream(sidecar).good()) return ShardIndex::Load(sidecar);
  } else if (IsRemoteUrl(url)) {
    WDS_ASSIGN_OR_RETURN(std::optional<ShardIndex> index, RemoteSidecar(url, opener));
    if (index.has_value()) return *std::move(index);
  }
  WDS_ASSIGN_OR_RETURN(std::unique_ptr<ByteStream> stream, opener(url));
  return ScanStream(std::move(stream));
}

std::vector<std::string_view> UnknownRemoteUrls(
    const std::vector<std::string>& urls, const std::function<bool(const std::string&)>& known) {
  std::vector<std::string_view> unknown;
  std::unordered_set<std::string_view> seen;
  for (const std::string& url : urls) {
    if (IsRemoteUrl(url) && !known(url) && seen.insert(url).second) unknown.push_back(url);
  }
  return unknown;
}

std::optional<std::string> LocalPath(std::string_view url) {
  if (StartsWith(url, "file://")) return std::string(url.substr(7));  // as OpenUrl reads it
  if (url == "-" || StartsWith(url, "pipe:") || url.find("://") != std::string_view::npos) {
    return std::nullopt;
  }
  if (StartsWith(url, "file:")) url.remove_prefix(5);
  return std::string(url);
}

std::vector<int64_t> SampleStartOffsets(const ShardIndex& index) {
  constexpr int64_t kBlock = 512;
  std::vector<int64_t> starts;
  starts.reserve(index.samples.size());
  int64_t next = 0;
  for (const IndexSample& sample : index.samples) {
    starts.push_back(next);
    if (!sample.members.empty()) {
      const IndexMember& last = sample.members.back();
      next = (last.offset + last.size + kBlock - 1) / kBlock * kBlock;
    }
  }
  return starts;
}

absl::StatusOr<int64_t> CountSamples(std::string_view url) {
  std::optional<std::string> path = LocalPath(url);
  if (path.has_value()) {
    const std::string sidecar = IndexPath(*path);
    std::ifstream in(sidecar);
    if (in) {
      std::string line;
      std::getline(in, line);
      int64_t num_samples = 0;
      WDS_RETURN_IF_ERROR(ParseHeader(line, sidecar, &num_samples).status());
      return num_samples;
    }
  }
  WDS_ASSIGN_OR_RETURN(ShardIndex index, ScanShard(url));
  return static_cast<int64_t>(index.samples.size());
}

int64_t DatasetIndex::total_samples() const {
  int64_t total = 0;
  for (const DatasetShard& s : shards) total += s.nsamples;
  return total;
}

std::string DatasetIndex::ToJson() const {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const DatasetShard& s : shards) {
    nlohmann::ordered_json item;
    item["url"] = s.url;
    item["nsamples"] = s.nsamples;
    item["filesize"] = s.filesize;
    list.push_back(std::move(item));
  }
  nlohmann::ordered_json doc;
  doc["__kind__"] = kWidsKind;
  doc["wids_version"] = 1;
  doc["shardlist"] = std::move(list);
  // Invalid UTF-8 in a URL is replaced rather than thrown about.
  return doc.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

absl::StatusOr<DatasetIndex> DatasetIndex::Parse(std::string_view text, std::string_view source,
                                                 std::string_view base_dir) {
  nlohmann::json doc = nlohmann::json::parse(text.begin(), text.end(), nullptr, false);
  if (doc.is_discarded()) return absl::InvalidArgumentError(Cat(source, ": not valid JSON"));
  if (!doc.is_object() || !doc.contains("shardlist") || !doc["shardlist"].is_array()) {
    return absl::InvalidArgumentError(Cat(source, ": not a wids shard index (no \"shardlist\")"));
  }
  if (doc.contains("__kind__") && doc["__kind__"] != kWidsKind) {
    return absl::InvalidArgumentError(
        Cat(source, ": \"__kind__\" is ", doc["__kind__"].dump(), ", expected ", kWidsKind));
  }
  DatasetIndex index;
  const nlohmann::json& list = doc["shardlist"];
  for (size_t i = 0; i < list.size(); ++i) {
    WDS_ASSIGN_OR_RETURN(DatasetShard shard, ParseShard(list[i], source, base_dir, i));
    index.shards.push_back(std::move(shard));
  }
  return index;
}

absl::StatusOr<DatasetIndex> DatasetIndex::Load(const std::string& path) {
  WDS_ASSIGN_OR_RETURN(std::string text, ReadWholeFile(path));
  return Parse(text, path, std::string(ParentDirectory(path)));
}

absl::StatusOr<DatasetIndex> DatasetIndex::Load(std::string_view url, const Opener& opener) {
  if (std::optional<std::string> path = LocalPath(url); path.has_value()) return Load(*path);
  absl::StatusOr<std::unique_ptr<ByteStream>> opened;
  if (opener) {
    opened = opener(url);
  } else {
    RemoteOptions uncached = RemoteOptions::FromEnvironment();
    uncached.cache_dir.clear();
    opened = RemoteOpener(std::move(uncached)).Open(url);
  }
  WDS_ASSIGN_OR_RETURN(std::unique_ptr<ByteStream> stream, std::move(opened));
  WDS_ASSIGN_OR_RETURN(std::string text,
                       ReadText(*stream, kMaxDatasetIndexBytes, "a dataset index"));
  return Parse(text, url, UrlDirectory(url));
}

absl::Status DatasetIndex::Save(const std::string& path) const {
  return WriteFileAtomically(path, ToJson());
}

}  // namespace wds
