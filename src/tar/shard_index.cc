// Shard indexes: header-only tar scans, DALI's text index, wids' JSON index.
#include "wds/shard_index.h"

#include <archive.h>
#include <archive_entry.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "wds/internal/status_macros.h"
#include "wds/internal/strings.h"
#include "wds/byte_stream.h"
#include "wds/tar_reader.h"

namespace wds {
namespace {

constexpr std::string_view kDaliVersion = "v1.2";
constexpr std::string_view kWidsKind = "wids-shard-index-v1";
constexpr size_t kReadBlock = size_t{1} << 20;

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// LocalPath returns the file a URL names, or nullopt for standard input,
// commands and remote URLs (which can only be streamed).
std::optional<std::string> LocalPath(std::string_view url) {
  if (url == "-" || StartsWith(url, "pipe:") || url.find("://") != std::string_view::npos) {
    return std::nullopt;
  }
  if (StartsWith(url, "file:")) url.remove_prefix(5);
  return std::string(url);
}

// StreamSource feeds a ByteStream to libarchive.
struct StreamSource {
  std::unique_ptr<ByteStream> stream;
  std::unique_ptr<char[]> buffer{new char[kReadBlock]};
  absl::Status error;

  static la_ssize_t Read(archive* ar, void* client, const void** out) {
    auto* self = static_cast<StreamSource*>(client);
    *out = self->buffer.get();
    absl::StatusOr<size_t> n = self->stream->Read(self->buffer.get(), kReadBlock);
    if (!n.ok()) {
      self->error = n.status();
      archive_set_error(ar, EIO, "%s", std::string(ToStd(n.status().message())).c_str());
      return -1;
    }
    return static_cast<la_ssize_t>(*n);
  }
};

// HeaderScanner walks the regular-file members of one tar without reading
// their data.
class HeaderScanner {
 public:
  explicit HeaderScanner(std::string url) : url_(std::move(url)) {}
  ~HeaderScanner() {
    if (ar_ != nullptr) archive_read_free(ar_);
  }
  HeaderScanner(const HeaderScanner&) = delete;
  HeaderScanner& operator=(const HeaderScanner&) = delete;

  absl::StatusOr<ShardIndex> Scan();

 private:
  absl::Status Open();
  absl::Status Fail(std::string_view what);
  absl::Status Add(ShardIndex& index, std::string name, int64_t offset, int64_t size);
  absl::Status Finish();

  std::string url_;
  archive* ar_ = nullptr;
  StreamSource source_;
  // file_size is known for a local file; offsets beyond it mean truncation.
  int64_t file_size_ = -1;
  int64_t position_ = 0;
  std::string key_;
};

absl::Status HeaderScanner::Open() {
  ar_ = archive_read_new();
  if (ar_ == nullptr) return absl::ResourceExhaustedError("archive_read_new failed");
  // The compressors a shard may use, by name (support_filter_all would run
  // external programs), and members after zero blocks, as TarReader reads.
  archive_read_support_filter_gzip(ar_);
  archive_read_support_filter_bzip2(ar_);
  archive_read_support_filter_xz(ar_);
  archive_read_support_filter_lzma(ar_);
  archive_read_support_filter_zstd(ar_);
  archive_read_support_filter_lz4(ar_);
  archive_read_support_format_tar(ar_);
  archive_read_set_format_option(ar_, "tar", "read_concatenated_archives", "1");
  std::optional<std::string> path = LocalPath(url_);
  int rc;
  if (path.has_value()) {
    struct stat st;
    if (stat(path->c_str(), &st) != 0) {
      return absl::ErrnoToStatus(errno, Cat(url_, ": cannot open"));
    }
    file_size_ = st.st_size;
    // A file handle lets libarchive seek over member data.
    rc = archive_read_open_filename(ar_, path->c_str(), kReadBlock);
  } else {
    WDS_ASSIGN_OR_RETURN(source_.stream, OpenUrl(url_));
    rc = archive_read_open(ar_, &source_, nullptr, &StreamSource::Read, nullptr);
  }
  if (rc != ARCHIVE_OK) return Fail("not a readable tar archive");
  return absl::OkStatus();
}

absl::Status HeaderScanner::Fail(std::string_view what) {
  if (!source_.error.ok()) return source_.error;
  const char* message = archive_error_string(ar_);
  // libarchive's private ARCHIVE_ERRNO_FILE_FORMAT is EILSEQ on Linux.
  if (archive_errno(ar_) == EILSEQ) {
    return absl::InvalidArgumentError(
        Cat(url_, ": not a tar archive (", message != nullptr ? message : "unknown format", ")"));
  }
  return absl::DataLossError(Cat(url_, ": ", what, " at offset ", position_, ": ",
                                 message != nullptr ? message : "unexpected end of data"));
}

absl::Status HeaderScanner::Add(ShardIndex& index, std::string name, int64_t offset, int64_t size) {
  if (file_size_ >= 0 && archive_filter_code(ar_, 0) == ARCHIVE_FILTER_NONE &&
      offset + size > file_size_) {
    return absl::DataLossError(Cat(url_, ": member ", name, " at offset ", position_,
                                   " is truncated: its data ends at ", offset + size,
                                   ", past the end of the file at ", file_size_));
  }
  if (IsMetadataName(name)) return absl::OkStatus();
  const std::optional<KeyField> split = SplitMemberName(name);
  if (!split.has_value()) return absl::OkStatus();
  if (index.samples.empty() || split->key != key_) {
    key_.assign(split->key);
    index.samples.emplace_back();
  }
  index.samples.back().members.push_back({std::string(split->field), offset, size, name});
  return absl::OkStatus();
}

absl::Status HeaderScanner::Finish() {
  if (source_.stream == nullptr) return absl::OkStatus();
  // Drain what follows the archive so that a pipe's exit status is judged on
  // a consumed stream.
  std::unique_ptr<char[]> rest(new char[kReadBlock]);
  while (true) {
    WDS_ASSIGN_OR_RETURN(size_t n, source_.stream->Read(rest.get(), kReadBlock));
    if (n == 0) break;
  }
  return source_.stream->Finish();
}

absl::StatusOr<ShardIndex> HeaderScanner::Scan() {
  WDS_RETURN_IF_ERROR(Open());
  ShardIndex index;
  while (true) {
    archive_entry* entry = nullptr;
    const int rc = archive_read_next_header(ar_, &entry);
    if (rc == ARCHIVE_EOF) break;
    if (rc != ARCHIVE_OK && rc != ARCHIVE_WARN) return Fail("truncated or corrupt tar");
    position_ = archive_read_header_position(ar_);
    const bool regular =
        archive_entry_filetype(entry) == AE_IFREG && archive_entry_hardlink(entry) == nullptr;
    const char* name = archive_entry_pathname(entry);
    if (name == nullptr) name = archive_entry_pathname_utf8(entry);
    if (regular && name != nullptr) {
      // After the header the reader stands at the member's data.
      WDS_RETURN_IF_ERROR(
          Add(index, name, archive_filter_bytes(ar_, 0), archive_entry_size(entry)));
    }
    if (archive_read_data_skip(ar_) != ARCHIVE_OK) return Fail("truncated or corrupt tar");
  }
  WDS_RETURN_IF_ERROR(Finish());
  return index;
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

std::string DirName(std::string_view path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string_view::npos) return "";
  return std::string(path.substr(0, slash == 0 ? 1 : slash));
}

bool IsRelativeUrl(std::string_view url) {
  return !url.empty() && url[0] != '/' && url.find(':') == std::string_view::npos;
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
  if (!base_dir.empty() && IsRelativeUrl(shard.url)) shard.url = Cat(base_dir, "/", shard.url);
  shard.nsamples = item["nsamples"].get<int64_t>();
  if (item.contains("filesize") && item["filesize"].is_number_integer()) {
    shard.filesize = item["filesize"].get<int64_t>();
  }
  return shard;
}

}  // namespace

std::string TemporaryPath(std::string_view path) {
  return Cat(path, ".", static_cast<int64_t>(getpid()), ".tmp");
}

absl::Status WriteFileAtomically(const std::string& path, std::string_view data) {
  const std::string temp = TemporaryPath(path);
  FILE* f = std::fopen(temp.c_str(), "wb");
  if (f == nullptr) return absl::ErrnoToStatus(errno, Cat(path, ": cannot create"));
  const bool written = std::fwrite(data.data(), 1, data.size(), f) == data.size();
  const int saved_errno = errno;
  if (std::fclose(f) != 0 || !written) {
    std::remove(temp.c_str());
    return absl::ErrnoToStatus(written ? errno : saved_errno, Cat(path, ": cannot write"));
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    const int rename_errno = errno;
    std::remove(temp.c_str());
    return absl::ErrnoToStatus(rename_errno, Cat(path, ": cannot rename ", temp, " into place"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ShardIndex::ToText() const {
  std::string out = Cat(kDaliVersion, " ", static_cast<int64_t>(samples.size()), "\n");
  for (const IndexSample& sample : samples) {
    const char* sep = "";
    for (const IndexMember& m : sample.members) {
      if (m.name.find_first_of(" \t\n\r\v\f") != std::string::npos) {
        return absl::InvalidArgumentError(
            Cat("member '", m.name, "' holds whitespace, which a DALI index cannot carry"));
      }
      out.append(Cat(sep, m.field, " ", m.offset, " ", m.size, " ", m.name));
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
  return HeaderScanner(std::string(url)).Scan();
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
  return Parse(text, path, DirName(path));
}

absl::Status DatasetIndex::Save(const std::string& path) const {
  return WriteFileAtomically(path, ToJson());
}

}  // namespace wds
