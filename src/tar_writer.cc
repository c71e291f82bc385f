#include "wds/tar_writer.h"

#include <archive.h>
#include <archive_entry.h>

#include <algorithm>
#include <optional>
#include <vector>

#include "str_util.h"

namespace wds {
namespace {

absl::Status ArchiveError(const std::string& path, struct archive* a, std::string_view what) {
  const char* message = archive_error_string(a);
  return absl::InternalError(Cat(path, ": ", what, ": ", message ? message : "unknown error"));
}

int AddFilter(struct archive* a, const TarWriterOptions& options) {
  switch (options.compression) {
    case TarCompression::kNone: return archive_write_add_filter_none(a);
    case TarCompression::kGzip: return archive_write_add_filter_gzip(a);
    case TarCompression::kZstd: return archive_write_add_filter_zstd(a);
  }
  return ARCHIVE_FATAL;
}

const char* FilterName(TarCompression c) { return c == TarCompression::kGzip ? "gzip" : "zstd"; }

// FieldBytes renders a field value the way the reference writer encodes
// bytes, text and numbers; arrays and lists need an encoder chosen by the
// caller (e.g. npy), so they are refused.
std::optional<std::string> FieldBytes(const Value& value) {
  if (const Buffer* b = std::get_if<Buffer>(&value)) return std::string(b->view());
  if (const std::string* s = std::get_if<std::string>(&value)) return *s;
  if (const int64_t* i = std::get_if<int64_t>(&value)) return Cat(*i);
  if (const double* d = std::get_if<double>(&value)) return Cat(*d);
  return std::nullopt;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TarWriter>> TarWriter::Create(const std::string& path,
                                                             TarWriterOptions options) {
  struct archive* a = archive_write_new();
  // pax_restricted writes plain ustar headers unless a name or size needs pax.
  if (archive_write_set_format_pax_restricted(a) != ARCHIVE_OK ||
      AddFilter(a, options) != ARCHIVE_OK) {
    absl::Status s = ArchiveError(path, a, "setting up the writer");
    archive_write_free(a);
    return s;
  }
  if (options.compression != TarCompression::kNone && options.level >= 0) {
    std::string level = Cat(options.level);
    if (archive_write_set_filter_option(a, FilterName(options.compression), "compression-level",
                                        level.c_str()) != ARCHIVE_OK) {
      absl::Status s = absl::InvalidArgumentError(
          Cat(path, ": compression level ", options.level, " is out of range"));
      archive_write_free(a);
      return s;
    }
  }
  // Tar files are padded to whole 10 KiB records by default; one block suffices.
  archive_write_set_bytes_in_last_block(a, 1);
  if (archive_write_open_filename(a, path.c_str()) != ARCHIVE_OK) {
    absl::Status s = absl::PermissionDeniedError(
        Cat(path, ": cannot create: ", archive_error_string(a)));
    archive_write_free(a);
    return s;
  }
  return std::unique_ptr<TarWriter>(new TarWriter(path, options, a));
}

TarWriter::TarWriter(std::string path, TarWriterOptions options, ::archive* archive)
    : path_(std::move(path)), options_(options), archive_(archive) {}

TarWriter::~TarWriter() {
  if (archive_ != nullptr) archive_write_free(archive_);
}

absl::Status TarWriter::WriteMember(std::string_view name, std::string_view data) {
  if (archive_ == nullptr) return absl::FailedPreconditionError(Cat(path_, ": writer is closed"));
  std::string name_text(name);
  struct archive_entry* entry = archive_entry_new();
  archive_entry_set_pathname(entry, name_text.c_str());
  archive_entry_set_filetype(entry, AE_IFREG);
  archive_entry_set_perm(entry, 0444);
  archive_entry_set_size(entry, static_cast<la_int64_t>(data.size()));
  archive_entry_set_mtime(entry, options_.mtime, 0);
  archive_entry_set_uid(entry, 0);
  archive_entry_set_gid(entry, 0);
  archive_entry_set_uname(entry, "bigdata");
  archive_entry_set_gname(entry, "bigdata");
  int rc = archive_write_header(archive_, entry);
  archive_entry_free(entry);
  if (rc != ARCHIVE_OK) return ArchiveError(path_, archive_, Cat("writing header of ", name));
  size_t done = 0;
  while (done < data.size()) {
    la_ssize_t n = archive_write_data(archive_, data.data() + done, data.size() - done);
    if (n <= 0) return ArchiveError(path_, archive_, Cat("writing ", name));
    done += static_cast<size_t>(n);
  }
  bytes_written_ += static_cast<int64_t>(data.size());
  return absl::OkStatus();
}

absl::Status TarWriter::Write(const Sample& sample) {
  const std::string* key = sample.GetString(kKeyField);
  if (key == nullptr || key->empty()) {
    return absl::InvalidArgumentError(Cat(path_, ": sample has no __key__"));
  }
  std::vector<const Sample::Field*> fields;
  for (const Sample::Field& f : sample) {
    if (!f.first.empty() && f.first[0] != '_') fields.push_back(&f);
  }
  std::sort(fields.begin(), fields.end(),
            [](const Sample::Field* a, const Sample::Field* b) { return a->first < b->first; });
  for (const Sample::Field* f : fields) {
    std::optional<std::string> bytes = FieldBytes(f->second);
    if (!bytes.has_value()) {
      return absl::InvalidArgumentError(Cat(path_, ": sample ", *key, ": field ", f->first,
                                            " is an array or a list; encode it to bytes first"));
    }
    absl::Status s = WriteMember(Cat(*key, ".", f->first), *bytes);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status TarWriter::Close() {
  if (archive_ == nullptr) return absl::OkStatus();
  int rc = archive_write_close(archive_);
  absl::Status s = rc == ARCHIVE_OK ? absl::OkStatus() : ArchiveError(path_, archive_, "closing");
  archive_write_free(archive_);
  archive_ = nullptr;
  return s;
}

}  // namespace wds
