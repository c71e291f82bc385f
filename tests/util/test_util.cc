#include "util/test_util.h"

#include <archive.h>
#include <archive_entry.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>

#include "wds/internal/io/directories.h"
#include "wds/tar/shard_index.h"

namespace wds::testing {
namespace {

void Check(int rc, archive* a, const char* what) {
  if (rc != ARCHIVE_OK) {
    throw std::runtime_error(std::string(what) + ": " + archive_error_string(a));
  }
}

int SetFormat(archive* a, TarFormat format) {
  switch (format) {
    case TarFormat::kUstar:
      return archive_write_set_format_ustar(a);
    case TarFormat::kPax:
      return archive_write_set_format_pax_restricted(a);
    case TarFormat::kGnu:
      return archive_write_set_format_gnutar(a);
  }
  return ARCHIVE_FATAL;
}

int SetFilter(archive* a, Compression compression) {
  switch (compression) {
    case Compression::kNone:
      return archive_write_add_filter_none(a);
    case Compression::kGzip:
      return archive_write_add_filter_gzip(a);
    case Compression::kBzip2:
      return archive_write_add_filter_bzip2(a);
    case Compression::kXz:
      return archive_write_add_filter_xz(a);
    case Compression::kZstd:
      return archive_write_add_filter_zstd(a);
  }
  return ARCHIVE_FATAL;
}

}  // namespace

std::string Compress(const std::string& data, Compression compression) {
  archive* a = archive_write_new();
  Check(archive_write_set_format_raw(a), a, "raw format");
  Check(SetFilter(a, compression), a, "filter");
  archive_write_set_bytes_in_last_block(a, 1);
  std::string out;
  auto write = [](archive*, void* client, const void* buf, size_t n) -> la_ssize_t {
    static_cast<std::string*>(client)->append(static_cast<const char*>(buf), n);
    return static_cast<la_ssize_t>(n);
  };
  Check(archive_write_open(a, &out, nullptr, write, nullptr), a, "open");
  archive_entry* entry = archive_entry_new();
  archive_entry_set_pathname(entry, "data");
  archive_entry_set_filetype(entry, AE_IFREG);
  archive_entry_set_size(entry, static_cast<la_int64_t>(data.size()));
  Check(archive_write_header(a, entry), a, "header");
  if (archive_write_data(a, data.data(), data.size()) != static_cast<la_ssize_t>(data.size())) {
    throw std::runtime_error("short write");
  }
  archive_entry_free(entry);
  Check(archive_write_close(a), a, "close");
  archive_write_free(a);
  return out;
}

std::string MakeTar(const std::vector<TarEntry>& entries, TarFormat format,
                    Compression compression) {
  archive* a = archive_write_new();
  Check(SetFormat(a, format), a, "format");
  Check(SetFilter(a, compression), a, "filter");
  // Names are written as the given bytes: libarchive would otherwise try to
  // convert them from the C locale to UTF-8 for pax headers, and fail.
  if (format == TarFormat::kPax)
    Check(archive_write_set_options(a, "hdrcharset=BINARY"), a, "hdrcharset");
  archive_write_set_bytes_in_last_block(a, 1);
  std::string out;
  auto open_cb = [](archive*, void*) { return ARCHIVE_OK; };
  auto write_cb = [](archive*, void* client, const void* buf, size_t n) -> la_ssize_t {
    static_cast<std::string*>(client)->append(static_cast<const char*>(buf), n);
    return static_cast<la_ssize_t>(n);
  };
  auto close_cb = [](archive*, void*) { return ARCHIVE_OK; };
  Check(archive_write_open(a, &out, open_cb, write_cb, close_cb), a, "open");
  for (const TarEntry& e : entries) {
    archive_entry* entry = archive_entry_new();
    archive_entry_set_pathname(entry, e.name.c_str());
    archive_entry_set_mtime(entry, 1700000000, 0);
    if (e.type == 'd') {
      archive_entry_set_filetype(entry, AE_IFDIR);
      archive_entry_set_perm(entry, 0755);
      archive_entry_set_size(entry, 0);
    } else if (e.type == 'l') {
      archive_entry_set_filetype(entry, AE_IFLNK);
      archive_entry_set_perm(entry, 0777);
      archive_entry_set_symlink(entry, e.data.c_str());
      archive_entry_set_size(entry, 0);
    } else {
      archive_entry_set_filetype(entry, AE_IFREG);
      archive_entry_set_perm(entry, 0644);
      archive_entry_set_size(entry, static_cast<la_int64_t>(e.data.size()));
    }
    Check(archive_write_header(a, entry), a, "header");
    if (e.type == 'f' && !e.data.empty()) {
      la_ssize_t n = archive_write_data(a, e.data.data(), e.data.size());
      if (n != static_cast<la_ssize_t>(e.data.size())) throw std::runtime_error("short write");
    }
    archive_entry_free(entry);
  }
  Check(archive_write_close(a), a, "close");
  archive_write_free(a);
  return out;
}

// TempDir uses POSIX calls, not std::filesystem (wds/internal/io/directories.h
// says why): the wds::torch tests link LibTorch.
TempDir::TempDir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string tmpl = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/wds-test-XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

TempDir::~TempDir() { (void)RemoveTree(path_); }

std::string TempDir::Write(std::string_view name, std::string_view data) const {
  const std::string p = path_ + "/" + std::string(name);
  if (!MakeDirectories(ParentDirectory(p)).ok()) throw std::runtime_error("cannot create " + p);
  std::ofstream f(p, std::ios::binary);
  f.write(data.data(), static_cast<std::streamsize>(data.size()));
  if (!f) throw std::runtime_error("cannot write " + p);
  return p;
}

absl::StatusOr<std::vector<Sample>> Drain(SampleStream& stream) {
  std::vector<Sample> out;
  while (true) {
    SampleResult item = stream.Next();
    if (!item.ok()) return item.status();
    if (!item->has_value()) return out;
    out.push_back(std::move(**item));
  }
}

std::vector<std::string> Keys(const std::vector<Sample>& samples) {
  std::vector<std::string> keys;
  for (const Sample& s : samples) keys.emplace_back(s.key());
  return keys;
}

std::string FieldText(const Sample& sample, std::string_view field) {
  if (const Buffer* b = sample.GetBytes(field)) return std::string(b->view());
  if (const std::string* s = sample.GetString(field)) return *s;
  return "";
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

ToolRun RunCaptured(const std::string& dir, const std::string& command) {
  const std::string out = dir + "/stdout", err = dir + "/stderr";
  const int status = RunShell("cd " + dir + " && " + command + " > " + out + " 2> " + err);
  return {status, ReadFile(out), ReadFile(err)};
}

std::string ToolPath(std::string_view tool) {
  return std::string(WDS_TOOLS_DIR) + "/" + std::string(tool);
}

ToolRun RunWdsShard(const TempDir& dir, const std::string& args) {
  return RunCaptured(dir.path(), ToolPath("wds-shard") + " " + args);
}

Sample MakeSample(const std::string& key,
                  const std::vector<std::pair<std::string, std::string>>& fields,
                  const std::string& url) {
  Sample s;
  s.Append(std::string(kKeyField), key);
  s.Append(std::string(kUrlField), url);
  for (const auto& [name, data] : fields) s.Append(name, Buffer::Copy(data));
  return s;
}

int RunShell(const std::string& command) {
  int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

namespace {

class VectorStream : public SampleStream {
 public:
  explicit VectorStream(std::shared_ptr<const std::vector<Sample>> samples)
      : samples_(std::move(samples)) {}
  SampleResult Next() override {
    if (next_ == samples_->size()) return std::nullopt;
    return (*samples_)[next_++];
  }

 private:
  std::shared_ptr<const std::vector<Sample>> samples_;
  size_t next_ = 0;
};

}  // namespace

StreamFactory VectorSource(std::vector<Sample> samples) {
  auto shared = std::make_shared<const std::vector<Sample>>(std::move(samples));
  return [shared](const WorkerContext&) { return std::make_unique<VectorStream>(shared); };
}

std::vector<std::string> WriteUnevenShards(const TempDir& dir, const std::vector<int>& sizes) {
  std::vector<std::string> urls;
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::vector<TarEntry> entries;
    for (int j = 0; j < sizes[i]; ++j) {
      const std::string key = "s" + std::to_string(i) + "_" + std::to_string(j);
      entries.push_back({key + ".cls", std::to_string(j % 7)});
      entries.push_back({key + ".txt", key});
    }
    urls.push_back(dir.Write("shard-" + std::to_string(i) + ".tar", MakeTar(entries)));
    absl::StatusOr<ShardIndex> index = ScanShard(urls.back());
    if (!index.ok() || !index->Save(IndexPath(urls.back())).ok()) {
      throw std::runtime_error("cannot index " + urls.back());
    }
  }
  return urls;
}

std::vector<std::string> UnevenShardKeys(const std::vector<int>& sizes) {
  std::vector<std::string> keys;
  for (size_t i = 0; i < sizes.size(); ++i) {
    for (int j = 0; j < sizes[i]; ++j)
      keys.push_back("s" + std::to_string(i) + "_" + std::to_string(j));
  }
  return keys;
}

ScopedEnv::ScopedEnv(const char* name, const char* value) : name_(name) {
  if (const char* old = std::getenv(name)) old_ = old;
  if (value != nullptr) {
    setenv(name, value, 1);
  } else {
    unsetenv(name);
  }
}

ScopedEnv::~ScopedEnv() {
  if (old_.has_value()) {
    setenv(name_, old_->c_str(), 1);
  } else {
    unsetenv(name_);
  }
}

}  // namespace wds::testing
