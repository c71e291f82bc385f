#include "wds/tar/tar_writer.h"

#include <archive.h>
#include <archive_entry.h>
#include <locale.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <vector>

#include "tar/gzip_file_sink.h"
#include "tar/zstd_file_sink.h"
#include "wds/internal/base/strings.h"

namespace wds {
namespace {

// WriteError reports a failed write, with the system's reason when there is
// one ("Write error (No space left on device)"): a full disk is the usual
// cause, and the one the user can act on.
absl::Status WriteError(const std::string& path, std::string_view what, const char* message,
                        int error_number) {
  const std::string reason = error_number > 0 ? Cat(" (", std::strerror(error_number), ")") : "";
  const absl::StatusCode code =
      error_number == ENOSPC || error_number == EFBIG || error_number == EDQUOT
          ? absl::StatusCode::kResourceExhausted
          : absl::StatusCode::kInternal;
  return absl::Status(code,
                      Cat(path, ": ", what, ": ", message ? message : "unknown error", reason));
}

// ArchiveError reports a failed libarchive call.
absl::Status ArchiveError(const std::string& path, struct archive* a, std::string_view what) {
  return WriteError(path, what, archive_error_string(a), archive_errno(a));
}

// MakeSink makes the compressor a compressed shard goes through (it creates
// `path`; the tar goes out of libarchive uncompressed), or null for none.
absl::StatusOr<std::unique_ptr<FileSink>> MakeSink(const std::string& path,
                                                   const TarWriterOptions& options) {
  switch (options.compression) {
    case TarCompression::kNone:
      return nullptr;
    case TarCompression::kGzip:
      return GzipFileSink::Create(path, options.level, options.threads);
    case TarCompression::kZstd:
      return ZstdFileSink::Create(path, options.level, options.threads);
  }
  return nullptr;
}

// WriteToSink is libarchive's output callback for compressed shards.
la_ssize_t WriteToSink(struct archive* a, void* sink_ptr, const void* data, size_t size) {
  FileSink& sink = *static_cast<FileSink*>(sink_ptr);
  if (sink.Write(std::string_view(static_cast<const char*>(data), size))) {
    return static_cast<la_ssize_t>(size);
  }
  archive_set_error(a, sink.error_number(), "%s", sink.error_message().c_str());
  return -1;
}

// OpenOutput opens `path` ("-": standard output), or starts writing into
// `sink` when there is one, which has opened `path` itself.
int OpenOutput(struct archive* a, const std::string& path, FileSink* sink) {
  if (sink != nullptr) return archive_write_open2(a, sink, nullptr, WriteToSink, nullptr, nullptr);
  if (path == "-") return archive_write_open_fd(a, 1);
  return archive_write_open_filename(a, path.c_str());
}

// Utf8Locale is a UTF-8 character-type locale, or (locale_t)0 if the system
// has none. libarchive converts names from the current locale's charset to
// UTF-8 for pax headers; in the C locale every non-ASCII name fails, so
// headers are written under this locale (per thread, with uselocale) and
// UTF-8 names reach the archive unchanged, as the reference writer stores them.
locale_t Utf8Locale() {
  static const locale_t utf8 = newlocale(LC_CTYPE_MASK, "C.UTF-8", static_cast<locale_t>(0));
  return utf8;
}

// WriteHeader writes `entry`'s header. ARCHIVE_WARN (a name that is not
// UTF-8, stored as raw bytes) still wrote the header.
int WriteHeader(struct archive* a, struct archive_entry* entry) {
  const locale_t utf8 = Utf8Locale();
  const locale_t previous = utf8 != static_cast<locale_t>(0) ? uselocale(utf8) : nullptr;
  const int rc = archive_write_header(a, entry);
  if (previous != nullptr) uselocale(previous);
  return rc == ARCHIVE_WARN ? ARCHIVE_OK : rc;
}

// FieldBytes is what the reference writer stores for bytes, text and numbers
// (numbers rendered into `scratch`); arrays and lists need an encoder chosen
// by the caller (e.g. npy), so they are refused.
std::optional<std::string_view> FieldBytes(const Value& value, std::string& scratch) {
  if (const Buffer* b = std::get_if<Buffer>(&value)) return b->view();
  if (const std::string* s = std::get_if<std::string>(&value)) return std::string_view(*s);
  if (const int64_t* i = std::get_if<int64_t>(&value)) return std::string_view(scratch = Cat(*i));
  if (const double* d = std::get_if<double>(&value)) return std::string_view(scratch = Cat(*d));
  return std::nullopt;
}

}  // namespace

struct TarWriter::State {
  State(std::string p, TarWriterOptions o) : path(std::move(p)), options(o) {}
  ~State() {
    if (archive == nullptr) return;
    archive_write_free(archive);  // writes out what it holds, into the sink if there
    if (sink != nullptr) (void)sink->Finish();
  }

  std::string path;
  TarWriterOptions options;
  struct archive* archive = archive_write_new();  // null once closed
  // sink compresses the tar (null for TarCompression::kNone).
  std::unique_ptr<FileSink> sink;
  int64_t bytes_written = 0;
  int64_t tar_bytes = 0;
};

absl::StatusOr<std::unique_ptr<TarWriter>> TarWriter::Create(const std::string& path,
                                                             TarWriterOptions options) {
  auto state = std::make_unique<State>(path, options);
  struct archive* a = state->archive;
  // pax_restricted writes plain ustar headers unless a name or size needs pax.
  if (archive_write_set_format_pax_restricted(a) != ARCHIVE_OK ||
      archive_write_add_filter_none(a) != ARCHIVE_OK) {
    return ArchiveError(path, a, "setting up the writer");
  }
  // Tar files are padded to whole 10 KiB records by default; one block suffices.
  archive_write_set_bytes_in_last_block(a, 1);
  if (absl::Status threads = CheckCompressionThreads(path, options.threads); !threads.ok()) {
    return threads;
  }
  // Checks the level, then creates the file.
  absl::StatusOr<std::unique_ptr<FileSink>> sink = MakeSink(path, options);
  if (!sink.ok()) return sink.status();
  state->sink = *std::move(sink);
  if (OpenOutput(a, path, state->sink.get()) != ARCHIVE_OK) {
    // The system's reason decides the code: a missing directory is NotFound.
    const int error_number = archive_errno(a);
    return error_number > 0 ? absl::ErrnoToStatus(error_number, Cat(path, ": cannot create"))
                            : absl::PermissionDeniedError(
                                  Cat(path, ": cannot create: ", archive_error_string(a)));
  }
  return std::unique_ptr<TarWriter>(new TarWriter(std::move(state)));
}

TarWriter::TarWriter(std::unique_ptr<State> state) : state_(std::move(state)) {}

TarWriter::~TarWriter() = default;

int64_t TarWriter::bytes_written() const { return state_->bytes_written; }
int64_t TarWriter::tar_bytes() const { return state_->tar_bytes; }
const std::string& TarWriter::path() const { return state_->path; }

absl::Status TarWriter::WriteMember(std::string_view name, std::string_view data,
                                    std::vector<WrittenMember>* written) {
  State& s = *state_;
  if (s.archive == nullptr) return absl::FailedPreconditionError(Cat(s.path, ": writer is closed"));
  std::string name_text(name);
  struct archive_entry* entry = archive_entry_new();
  archive_entry_set_pathname(entry, name_text.c_str());
  archive_entry_set_filetype(entry, AE_IFREG);
  archive_entry_set_perm(entry, 0444);
  archive_entry_set_size(entry, static_cast<la_int64_t>(data.size()));
  archive_entry_set_mtime(entry, s.options.mtime, 0);
  archive_entry_set_uid(entry, 0);
  archive_entry_set_gid(entry, 0);
  archive_entry_set_uname(entry, "bigdata");
  archive_entry_set_gname(entry, "bigdata");
  int rc = WriteHeader(s.archive, entry);
  archive_entry_free(entry);
  if (rc != ARCHIVE_OK) return ArchiveError(s.path, s.archive, Cat("writing header of ", name));
  // Filter 0 is the one the tar format writes into: it counts uncompressed bytes.
  const int64_t data_offset = archive_filter_bytes(s.archive, 0);
  size_t done = 0;
  while (done < data.size()) {
    la_ssize_t n = archive_write_data(s.archive, data.data() + done, data.size() - done);
    if (n <= 0) return ArchiveError(s.path, s.archive, Cat("writing ", name));
    done += static_cast<size_t>(n);
  }
  s.bytes_written += static_cast<int64_t>(data.size());
  s.tar_bytes = archive_filter_bytes(s.archive, 0);
  if (written != nullptr) {
    written->push_back({std::string(name), data_offset, static_cast<int64_t>(data.size())});
  }
  return absl::OkStatus();
}

absl::Status TarWriter::Write(const Sample& sample, std::vector<WrittenMember>* written) {
  const std::string* key = sample.GetString(kKeyField);
  if (key == nullptr || key->empty()) {
    return absl::InvalidArgumentError(Cat(state_->path, ": sample has no __key__"));
  }
  std::vector<const Sample::Field*> fields;
  for (const Sample::Field& f : sample) {
    if (!f.first.empty() && f.first[0] != '_') fields.push_back(&f);
  }
  std::sort(fields.begin(), fields.end(),
            [](const Sample::Field* a, const Sample::Field* b) { return a->first < b->first; });
  std::string scratch;
  for (const Sample::Field* f : fields) {
    std::optional<std::string_view> bytes = FieldBytes(f->second, scratch);
    if (!bytes.has_value()) {
      return absl::InvalidArgumentError(Cat(state_->path, ": sample ", *key, ": field ", f->first,
                                            " is an array or a list; encode it to bytes first"));
    }
    absl::Status s = WriteMember(Cat(*key, ".", f->first), *bytes, written);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status TarWriter::Close() {
  State& s = *state_;
  if (s.archive == nullptr) return absl::OkStatus();
  int rc = archive_write_close(s.archive);
  s.tar_bytes = archive_filter_bytes(s.archive, 0);
  absl::Status status =
      rc == ARCHIVE_OK ? absl::OkStatus() : ArchiveError(s.path, s.archive, "closing");
  // The compressed stream is ended here, not in a libarchive close callback:
  // libarchive ignores what that returns, and a full disk must not go
  // unreported.
  if (status.ok() && s.sink != nullptr && !s.sink->Finish()) {
    status = WriteError(s.path, "closing", s.sink->error_message().c_str(), s.sink->error_number());
  }
  archive_write_free(s.archive);
  s.archive = nullptr;
  s.sink.reset();
  return status;
}

}  // namespace wds
