// TarReader: libarchive over a ByteStream, one Buffer per regular member.
//
// Truncation and corruption are never silent:
//  - "read_concatenated_archives" makes libarchive read every block up to the
//    end of the (decompressed) stream, so each decompressor sees its whole
//    input and reports a cut-off or damaged stream wherever the damage is
//    (by default libarchive stops at the first zero block);
//  - at the end, at least one zero block must follow the last member, which
//    tells a complete archive from one cut between two members (libarchive
//    takes the end of data at a header boundary for a normal end);
//  - gzip, the usual shard compression, is inflated here with zlib, which
//    checks each member's CRC-32 and length; libarchive's gzip filter checks
//    neither, and corrupt bytes in a stored block would pass unnoticed.
// Members after a zero block (tars concatenated with cat) are read too, as
// `tar --ignore-zeros` does.
#include "wds/tar/tar_reader.h"

#include <archive.h>
#include <archive_entry.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

#include "absl/strings/cord.h"
#include "tar/tar_header.h"
#include "wds/base/error_kind.h"
#include "wds/internal/base/status_macros.h"
#include "wds/internal/base/strings.h"

namespace wds {
namespace {

// kDataChunkSize bounds what one archive_read_data call fills of a member.
constexpr size_t kDataChunkSize = size_t{1} << 20;
constexpr int64_t kBlockSize = 512;
// The read buffer holds at least a tar header, to recognise a plain tar by
// its first one; 4 KiB is a page.
constexpr size_t kMinReadBufferSize = 4096;
constexpr size_t kMaxReadBufferSize = size_t{1} << 30;
constexpr unsigned char kGzipMagic[] = {0x1f, 0x8b};
// kGzipChunkSize bounds what one read inflates: a damaged stream fails the
// read that reaches the damage, so a small chunk keeps the members before it
// and names the member that meets it.
constexpr size_t kGzipChunkSize = size_t{64} << 10;
// Members below kPooledMemberSize are allocated on their own: a pool block is
// at least a page, and malloc keeps small blocks without trimming them away.
constexpr int64_t kPooledMemberSize = 4096;
// Members above kGrowingMemberSize get storage that grows with the bytes that
// arrive (kGrowingMemberSize first, then doubling, up to the size announced),
// so a header that lies about a size below max_member_size reserves at most
// twice what was actually sent. Below it, a member takes one allocation of
// its size, as fast as before; above it, glibc's realloc of mmap'ed blocks
// moves pages (mremap) rather than bytes, so growing costs no copy.
constexpr int64_t kGrowingMemberSize = int64_t{32} << 20;

std::string_view ArchiveMessage(archive* ar) {
  const char* message = archive_error_string(ar);
  return message == nullptr ? std::string_view("unexpected end of data") : message;
}

// Annotate keeps a stream error's code and payloads (what an opener attached
// for its callers, e.g. an errno) and adds where the reader was.
absl::Status Annotate(const absl::Status& error, std::string_view where) {
  absl::Status annotated(error.code(), Cat(ToStd(error.message()), " (", where, ")"));
  error.ForEachPayload(
      [&annotated](auto type, const absl::Cord& payload) { annotated.SetPayload(type, payload); });
  return annotated;
}

// Unreadable marks a reader's own error: the shard at `url` is not a readable
// tar (wds/base/error_kind.h).
absl::Status Unreadable(absl::Status error, std::string_view url) {
  return WithErrorKind(std::move(error), ErrorKind::kShardUnreadable, url);
}

bool IsRegularFile(archive_entry* entry) {
  // Hard links carry no data of their own (the reference skips them as well).
  return archive_entry_filetype(entry) == AE_IFREG && archive_entry_hardlink(entry) == nullptr;
}

const char* EntryName(archive_entry* entry) {
  const char* name = archive_entry_pathname(entry);
  return name != nullptr ? name : archive_entry_pathname_utf8(entry);
}

// GzipDecoder inflates a gzip stream (one or more members, as gzip(1) reads
// them) from a ByteStream, verifying each member's CRC-32 and length. Bytes
// after the last member that do not start another one are left unread.
class GzipDecoder {
 public:
  // `head` holds the first bytes already read from `stream`; the decoder
  // reads up to `input_size` (at least head.size()) compressed bytes at a time.
  GzipDecoder(ByteStream& stream, std::string_view head, size_t input_size)
      : stream_(stream), input_(new unsigned char[input_size]), input_size_(input_size) {
    std::memcpy(input_.get(), head.data(), head.size());
    z_.next_in = input_.get();
    z_.avail_in = static_cast<uInt>(head.size());
    read_ = static_cast<int64_t>(head.size());
    // 16 + MAX_WBITS: a gzip wrapper, whose trailer inflate checks.
    ok_ = inflateInit2(&z_, 16 + MAX_WBITS) == Z_OK;
  }
  ~GzipDecoder() { inflateEnd(&z_); }
  GzipDecoder(const GzipDecoder&) = delete;
  GzipDecoder& operator=(const GzipDecoder&) = delete;

  // Read inflates up to `size` bytes into `out`; 0 after the last member.
  absl::StatusOr<size_t> Read(void* out, size_t size) {
    if (!ok_) return absl::ResourceExhaustedError(Cat(stream_.url(), ": cannot start zlib"));
    z_.next_out = static_cast<Bytef*>(out);
    z_.avail_out = static_cast<uInt>(size);
    while (z_.avail_out > 0 && !finished_) {
      if (z_.avail_in == 0 && !input_at_end_) WDS_RETURN_IF_ERROR(Refill());
      // Even without new input, inflate may still have output to give.
      const int rc = inflate(&z_, Z_NO_FLUSH);
      if (rc == Z_STREAM_END) {
        WDS_RETURN_IF_ERROR(StartNextMember());
      } else if (rc == Z_BUF_ERROR && z_.avail_in == 0 && input_at_end_) {
        return Unreadable(
            absl::DataLossError(Cat(stream_.url(), ": truncated gzip data: the stream ends at ",
                                    "compressed offset ", read_, " inside a gzip member")),
            stream_.url());
      } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
        return Unreadable(
            absl::DataLossError(Cat(stream_.url(), ": corrupt gzip data at compressed offset ",
                                    read_ - z_.avail_in, ": ",
                                    z_.msg != nullptr ? z_.msg : "inflate failed")),
            stream_.url());
      }
    }
    return size - z_.avail_out;
  }

 private:
  // Refill moves the unread input to the front and reads more after it.
  absl::Status Refill() {
    std::memmove(input_.get(), z_.next_in, z_.avail_in);
    z_.next_in = input_.get();
    WDS_ASSIGN_OR_RETURN(size_t n,
                         stream_.Read(input_.get() + z_.avail_in, input_size_ - z_.avail_in));
    z_.avail_in += static_cast<uInt>(n);
    read_ += static_cast<int64_t>(n);
    if (n == 0) input_at_end_ = true;
    return absl::OkStatus();
  }

  absl::Status StartNextMember() {
    while (z_.avail_in < sizeof(kGzipMagic) && !input_at_end_) WDS_RETURN_IF_ERROR(Refill());
    if (z_.avail_in < sizeof(kGzipMagic) ||
        std::memcmp(z_.next_in, kGzipMagic, sizeof(kGzipMagic)) != 0) {
      finished_ = true;
      return absl::OkStatus();
    }
    if (inflateReset(&z_) != Z_OK) {
      return absl::InternalError(Cat(stream_.url(), ": cannot reset zlib"));
    }
    return absl::OkStatus();
  }

  ByteStream& stream_;
  std::unique_ptr<unsigned char[]> input_;
  size_t input_size_;
  z_stream z_{};
  bool ok_ = false;
  bool finished_ = false;
  bool input_at_end_ = false;
  // read_ counts the compressed bytes read from the stream.
  int64_t read_ = 0;
};

}  // namespace

struct TarReader::State {
  State(std::unique_ptr<ByteStream> s, TarReaderOptions o)
      : stream(std::move(s)), options(o), buffer(new char[o.read_buffer_size]) {}
  ~State() {
    if (ar != nullptr) archive_read_free(ar);
  }

  absl::StatusOr<std::optional<TarMember>> ReadNext();
  absl::Status OpenArchive();
  absl::Status StartSource();
  absl::Status FillHead();
  bool HeadIsTarHeader() const;
  absl::Status InflateTo(int64_t start);
  absl::Status SeekTo(int64_t start);
  absl::Status EndsBefore(int64_t end, int64_t start) const;
  // Position is the reader's offset in the uncompressed tar.
  int64_t Position() const { return base + archive_filter_bytes(ar, 0); }
  absl::Status SkipRestOfEntry();
  absl::StatusOr<Buffer> ReadData(const char* name, int64_t offset, int64_t size);
  absl::StatusOr<Buffer> ReadGrowing(const char* name, int64_t offset, int64_t size);
  absl::Status Fill(uint8_t* data, size_t end, size_t& filled, const char* name, int64_t offset,
                    int64_t size);
  absl::Status FinishArchive();
  absl::Status HeaderError(int64_t position);
  absl::Status EntryError(std::string_view detail);
  std::string AfterPrevious() const;

  static la_ssize_t ReadCallback(archive* ar, void* client, const void** out);
  static la_int64_t SkipCallback(archive* ar, void* client, la_int64_t request);

  std::unique_ptr<ByteStream> stream;
  TarReaderOptions options;
  std::unique_ptr<char[]> buffer;
  // gzip inflates the stream when it starts like gzip data, not with a tar
  // header.
  std::unique_ptr<GzipDecoder> gzip;
  // head is how many bytes at the start of `buffer` were read (inflated,
  // for gzip) before libarchive asked for data.
  size_t head = 0;
  // tar_first is set when libarchive's input starts with a valid tar header.
  bool tar_first = false;
  // base is the tar offset at which libarchive's input starts (the start
  // offset where the source was seeked or inflated to, else 0).
  int64_t base = 0;
  // source_offset is the offset in the shard (compressed, where it is) just
  // past the bytes libarchive was given or skipped; not kept for gzip,
  // whose decoder names its own offsets.
  int64_t source_offset = 0;
  // walk_to is a start offset that libarchive reaches by skipping the
  // entries before it (compressions that libarchive inflates).
  int64_t walk_to = 0;
  archive* ar = nullptr;
  // stream_error is the source's own error, which beats libarchive's
  // report of it.
  absl::Status stream_error;
  bool in_entry = false;
  // entry is the regular member whose unread data is still to be skipped,
  // for messages; its name is empty otherwise (a failure in the padding
  // after data that was read is reported after the member, as one between
  // members).
  std::string entry_name;
  int64_t entry_offset = 0;
  // entry_end is the position just past the previous entry and its padding.
  int64_t entry_end = 0;
  std::string previous_name;
  std::string failed_name;
  // done is set once the stream ended (ok) or failed; both are sticky.
  std::optional<absl::Status> done;
};

la_ssize_t TarReader::State::ReadCallback(archive* ar, void* client, const void** out) {
  auto* state = static_cast<State*>(client);
  *out = state->buffer.get();
  if (state->head > 0) {
    // (Inflated bytes, for gzip: not the compressed offset's.)
    if (state->gzip == nullptr) state->source_offset += static_cast<int64_t>(state->head);
    return static_cast<la_ssize_t>(std::exchange(state->head, 0));
  }
  absl::StatusOr<size_t> n =
      state->gzip != nullptr
          ? state->gzip->Read(state->buffer.get(),
                              std::min(kGzipChunkSize, state->options.read_buffer_size))
          : state->stream->Read(state->buffer.get(), state->options.read_buffer_size);
  if (!n.ok()) {
    state->stream_error = n.status();
    archive_set_error(ar, EIO, "%s", std::string(ToStd(n.status().message())).c_str());
    return -1;
  }
  if (state->gzip == nullptr) state->source_offset += static_cast<int64_t>(*n);
  return static_cast<la_ssize_t>(*n);
}

// SkipCallback lets libarchive seek over member data it does not want, which
// it asks for only while no libarchive decompressor sits in between. A gzip
// stream is inflated here and cannot be skipped: 0 makes libarchive read.
la_int64_t TarReader::State::SkipCallback(archive* ar, void* client, la_int64_t request) {
  auto* state = static_cast<State*>(client);
  if (state->gzip != nullptr) return 0;
  absl::StatusOr<int64_t> n = state->stream->Skip(request);
  if (!n.ok()) {
    state->stream_error = n.status();
    archive_set_error(ar, EIO, "%s", std::string(ToStd(n.status().message())).c_str());
    return ARCHIVE_FATAL;
  }
  state->source_offset += *n;
  return *n;
}

// StartSource decides what the stream is from its first bytes. One that
// starts with a valid tar header is a plain tar, whatever its first bytes (a
// member's name) look like; only another is sniffed for compression: here
// for gzip, then by libarchive's filters for the others. An inflated gzip
// stream is judged by the same rule.
absl::Status TarReader::State::StartSource() {
  const int64_t start = options.start_offset;
  WDS_RETURN_IF_ERROR(FillHead());
  if (!HeadIsTarHeader() && head >= sizeof(kGzipMagic) &&
      std::memcmp(buffer.get(), kGzipMagic, sizeof(kGzipMagic)) == 0) {
    gzip = std::make_unique<GzipDecoder>(*stream, std::string_view(buffer.get(), head),
                                         options.read_buffer_size);
    head = 0;
    if (start > 0) return InflateTo(start);
    WDS_RETURN_IF_ERROR(FillHead());
  }
  tar_first = HeadIsTarHeader();
  if (start > 0) {
    if (tar_first) return SeekTo(start);
    walk_to = start;
  }
  return absl::OkStatus();
}

// FillHead reads a tar header's worth of bytes into `buffer` (one read may
// give fewer), or what there is of a shorter stream: inflated ones once a
// gzip decoder reads the stream.
absl::Status TarReader::State::FillHead() {
  while (head < static_cast<size_t>(kBlockSize)) {
    absl::StatusOr<size_t> n =
        gzip != nullptr ? gzip->Read(buffer.get() + head, kBlockSize - head)
                        : stream->Read(buffer.get() + head, options.read_buffer_size - head);
    WDS_RETURN_IF_ERROR(n.status());
    if (*n == 0) break;
    head += *n;
  }
  return absl::OkStatus();
}

// HeadIsTarHeader says whether the bytes read ahead start with a valid tar
// header (a stream shorter than one does not).
bool TarReader::State::HeadIsTarHeader() const {
  return head >= static_cast<size_t>(kBlockSize) &&
         ValidTarHeader(reinterpret_cast<const unsigned char*>(buffer.get()));
}

absl::Status TarReader::State::InflateTo(int64_t start) {
  for (int64_t done = 0; done < start;) {
    const size_t want =
        static_cast<size_t>(std::min<int64_t>(start - done, options.read_buffer_size));
    WDS_ASSIGN_OR_RETURN(size_t n, gzip->Read(buffer.get(), want));
    if (n == 0) return EndsBefore(done, start);
    done += static_cast<int64_t>(n);
  }
  base = start;
  return absl::OkStatus();
}

absl::Status TarReader::State::SeekTo(int64_t start) {
  base = start;
  source_offset = start;
  if (static_cast<size_t>(start) <= head) {
    head -= static_cast<size_t>(start);
    std::memmove(buffer.get(), buffer.get() + start, head);
    return absl::OkStatus();
  }
  int64_t done = static_cast<int64_t>(std::exchange(head, 0));
  while (done < start) {
    WDS_ASSIGN_OR_RETURN(int64_t skipped, stream->Skip(start - done));
    if (skipped == 0) {
      const size_t want =
          static_cast<size_t>(std::min<int64_t>(start - done, options.read_buffer_size));
      WDS_ASSIGN_OR_RETURN(size_t n, stream->Read(buffer.get(), want));
      if (n == 0) return EndsBefore(done, start);
      skipped = static_cast<int64_t>(n);
    }
    done += skipped;
  }
  return absl::OkStatus();
}

absl::Status TarReader::State::EndsBefore(int64_t end, int64_t start) const {
  return Unreadable(absl::DataLossError(Cat(stream->url(), ": truncated: the tar ends at offset ",
                                            end, ", before start offset ", start)),
                    stream->url());
}

absl::Status TarReader::State::OpenArchive() {
  WDS_RETURN_IF_ERROR(StartSource());
  if (head == 0 && gzip == nullptr && base == 0) {
    // The source ended: what it can say about that (a pipe: command's exit
    // status) explains an empty shard better than the reader can.
    WDS_RETURN_IF_ERROR(stream->Finish());
    return Unreadable(
        absl::InvalidArgumentError(Cat(stream->url(), ": not a tar archive (no data)")),
        stream->url());
  }
  ar = archive_read_new();
  if (ar == nullptr) return absl::ResourceExhaustedError("archive_read_new failed");
  archive_read_support_format_tar(ar);
  archive_read_set_format_option(ar, "tar", "read_concatenated_archives", "1");
  if (tar_first || base > 0) {
    // The input starts with a valid header, or at a header inside an
    // uncompressed tar (seeked or inflated to): no filter may claim it (its
    // name may begin like a magic number), and the format is known. Without
    // set_format libarchive would bid on that header as on a first one, with
    // stricter checks of its number fields than when it reads the same header
    // in sequence, and refuse what a full read accepts. (After the option:
    // setting an option forgets a format that was set.)
    if (archive_read_set_format(ar, ARCHIVE_FORMAT_TAR) != ARCHIVE_OK) {
      return absl::InternalError(Cat("archive_read_set_format: ", ArchiveMessage(ar)));
    }
  } else {
    // Only the compressors a shard may use, by name: support_filter_all would
    // also run external programs (lrzip, grzip, lzop) on whatever bytes come in.
    archive_read_support_filter_bzip2(ar);
    archive_read_support_filter_xz(ar);
    archive_read_support_filter_lzma(ar);
    archive_read_support_filter_zstd(ar);
    archive_read_support_filter_lz4(ar);
  }
  archive_read_set_read_callback(ar, &ReadCallback);
  archive_read_set_skip_callback(ar, &SkipCallback);
  archive_read_set_callback_data(ar, this);
  if (archive_read_open1(ar) == ARCHIVE_OK) return absl::OkStatus();
  if (!stream_error.ok()) return stream_error;
  // libarchive's private ARCHIVE_ERRNO_FILE_FORMAT is EILSEQ on Linux: no
  // format (after any decompression) recognised the data.
  if (archive_errno(ar) == EILSEQ) {
    return Unreadable(absl::InvalidArgumentError(
                          Cat(stream->url(), ": not a tar archive (", ArchiveMessage(ar), ")")),
                      stream->url());
  }
  // libarchive says what is wrong, not where: what was read tells how far
  // into the shard it found out (for a truncation, the very end).
  return Unreadable(
      absl::DataLossError(Cat(stream->url(),
                              ": corrupt or truncated compressed data, detected by compressed "
                              "offset ",
                              source_offset, ": ", ArchiveMessage(ar))),
      stream->url());
}

std::string TarReader::State::AfterPrevious() const {
  if (previous_name.empty()) return "";
  return Cat(" after member ", previous_name);
}

absl::Status TarReader::State::HeaderError(int64_t position) {
  if (!stream_error.ok()) {
    return Annotate(stream_error, Cat("at offset ", position, AfterPrevious()));
  }
  return Unreadable(absl::DataLossError(Cat(stream->url(), ": truncated or corrupt tar at offset ",
                                            position, AfterPrevious(), ": ", ArchiveMessage(ar))),
                    stream->url());
}

// EntryError names the member whose data or padding could not be read.
absl::Status TarReader::State::EntryError(std::string_view detail) {
  failed_name = entry_name;
  const std::string where = Cat("member ", entry_name, " at offset ", entry_offset);
  if (!stream_error.ok()) return Annotate(stream_error, where);
  return Unreadable(
      absl::DataLossError(Cat(stream->url(), ": ", where, ": truncated or corrupt: ", detail)),
      stream->url());
}

absl::Status TarReader::State::SkipRestOfEntry() {
  if (in_entry) {
    in_entry = false;
    // Consumes the padding of a member that was read, or a skipped entry.
    if (archive_read_data_skip(ar) != ARCHIVE_OK) {
      if (!entry_name.empty()) return EntryError(ArchiveMessage(ar));
      return HeaderError(Position());
    }
  }
  entry_end = Position();
  return absl::OkStatus();
}

absl::StatusOr<Buffer> TarReader::State::ReadData(const char* name, int64_t offset, int64_t size) {
  if (size < 0) {
    return Unreadable(
        absl::DataLossError(Cat(stream->url(), ": member ", name, " at offset ", offset,
                                ": implausible size ", size, " in its header")),
        stream->url());
  }
  if (size > kGrowingMemberSize) return ReadGrowing(name, offset, size);
  Buffer data;
  if (options.pool != nullptr && size >= kPooledMemberSize) {
    absl::StatusOr<Buffer> pooled = options.pool->Acquire(static_cast<size_t>(size));
    if (!pooled.ok()) {
      return absl::ResourceExhaustedError(Cat(stream->url(), ": member ", name, " at offset ",
                                              offset, ": ", ToStd(pooled.status().message())));
    }
    data = *std::move(pooled);
  } else {
    try {
      data = Buffer::Allocate(static_cast<size_t>(size));
    } catch (const std::bad_alloc&) {
      return absl::ResourceExhaustedError(Cat(stream->url(), ": member ", name, " at offset ",
                                              offset, ": cannot allocate ", size, " bytes"));
    }
  }
  size_t filled = 0;
  WDS_RETURN_IF_ERROR(Fill(data.mutable_data(), data.size(), filled, name, offset, size));
  return data;
}

// ReadGrowing reads a large member into malloc'ed storage that grows
// geometrically as its bytes arrive (not from the pool, whose size classes
// would keep every intermediate block cached).
absl::StatusOr<Buffer> TarReader::State::ReadGrowing(const char* name, int64_t offset,
                                                     int64_t size) {
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, Free> storage;
  const size_t total = static_cast<size_t>(size);
  size_t capacity = 0;
  size_t filled = 0;
  while (filled < total) {
    capacity = std::min(total, std::max(static_cast<size_t>(kGrowingMemberSize), 2 * capacity));
    void* grown = std::realloc(storage.get(), capacity);
    if (grown == nullptr) {
      return absl::ResourceExhaustedError(Cat(stream->url(), ": member ", name, " at offset ",
                                              offset, ": cannot allocate ", capacity, " of ", size,
                                              " bytes"));
    }
    (void)storage.release();  // realloc took it over
    storage.reset(static_cast<uint8_t*>(grown));
    WDS_RETURN_IF_ERROR(Fill(storage.get(), capacity, filled, name, offset, size));
  }
  uint8_t* bytes = storage.release();
  std::shared_ptr<const void> owner(bytes, [](const void* p) { std::free(const_cast<void*>(p)); });
  return Buffer::View(std::move(owner), bytes, total);
}

// Fill reads the member's bytes into data[filled, end), at most a read
// buffer's worth per call: archive_read_data drops the count of a call that
// fails, and `filled` is what the error says arrived.
absl::Status TarReader::State::Fill(uint8_t* data, size_t end, size_t& filled, const char* name,
                                    int64_t offset, int64_t size) {
  while (filled < end) {
    la_ssize_t n = archive_read_data(ar, data + filled, std::min(end - filled, kDataChunkSize));
    if (n <= 0) {
      std::string where = Cat("member ", name, " at offset ", offset);
      if (!stream_error.ok()) return Annotate(stream_error, where);
      return Unreadable(
          absl::DataLossError(
              Cat(stream->url(), ": ", where, ": truncated or corrupt after ", filled, " of ", size,
                  " bytes: ", n == 0 ? "unexpected end of data" : ArchiveMessage(ar))),
          stream->url());
    }
    filled += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status TarReader::State::FinishArchive() {
  const int64_t end = Position();
  if (end - entry_end < kBlockSize) {
    return Unreadable(
        absl::DataLossError(Cat(stream->url(), ": truncated: the data ends at offset ", end,
                                AfterPrevious(), " without an end-of-archive block")),
        stream->url());
  }
  // Whatever follows the compressed stream is read too, so that the stream's
  // Finish (a pipe command's exit status) judges a fully consumed source.
  while (true) {
    WDS_ASSIGN_OR_RETURN(size_t n, stream->Read(buffer.get(), options.read_buffer_size));
    if (n == 0) break;
  }
  return stream->Finish();
}

absl::StatusOr<std::optional<TarMember>> TarReader::State::ReadNext() {
  if (ar == nullptr) WDS_RETURN_IF_ERROR(OpenArchive());
  while (true) {
    WDS_RETURN_IF_ERROR(SkipRestOfEntry());
    archive_entry* entry = nullptr;
    const int rc = archive_read_next_header(ar, &entry);
    if (rc == ARCHIVE_EOF) {
      if (walk_to > 0) return EndsBefore(Position(), walk_to);
      WDS_RETURN_IF_ERROR(FinishArchive());
      return std::nullopt;
    }
    // ARCHIVE_WARN reports a name the C locale cannot represent; its bytes
    // are still there. RETRY (a damaged header) and FATAL end the archive.
    if (rc != ARCHIVE_OK && rc != ARCHIVE_WARN) return HeaderError(entry_end);
    in_entry = true;
    entry_name.clear();
    if (walk_to > 0) {
      if (base + archive_read_header_position(ar) < walk_to) continue;
      walk_to = 0;
    }
    if (!IsRegularFile(entry)) continue;
    TarMember member;
    member.offset = base + archive_read_header_position(ar);
    // After the header the reader stands at the member's data.
    member.data_offset = Position();
    member.size = archive_entry_size(entry);
    const char* name = EntryName(entry);
    if (name == nullptr) {
      return Unreadable(absl::DataLossError(Cat(stream->url(), ": member at offset ", member.offset,
                                                " has no readable name: ", ArchiveMessage(ar))),
                        stream->url());
    }
    if (member.size > options.max_member_size) {
      failed_name = name;
      return absl::ResourceExhaustedError(
          Cat(stream->url(), ": member ", name, " at offset ", member.offset, " is ", member.size,
              " bytes, more than max_member_size ", options.max_member_size));
    }
    const bool read = options.read_data && (!options.want || options.want(name));
    if (read) {
      absl::StatusOr<Buffer> data = ReadData(name, member.offset, member.size);
      if (!data.ok()) {
        failed_name = name;
        return data.status();
      }
      member.data = *std::move(data);
    }
    member.name = name;
    if (!read) {
      entry_name = member.name;
      entry_offset = member.offset;
    }
    previous_name.assign(member.name);
    return member;
  }
}

TarReader::TarReader(std::unique_ptr<State> state) : state_(std::move(state)) {}
TarReader::~TarReader() = default;

absl::StatusOr<std::unique_ptr<TarReader>> TarReader::Open(std::unique_ptr<ByteStream> stream,
                                                           TarReaderOptions options) {
  if (stream == nullptr) return absl::InvalidArgumentError("TarReader::Open: null stream");
  if (options.read_buffer_size < kMinReadBufferSize ||
      options.read_buffer_size > kMaxReadBufferSize) {
    return absl::InvalidArgumentError(Cat("TarReader::Open: read_buffer_size ",
                                          options.read_buffer_size, " is not within ",
                                          kMinReadBufferSize, " to ", kMaxReadBufferSize));
  }
  return std::unique_ptr<TarReader>(
      new TarReader(std::make_unique<State>(std::move(stream), options)));
}

absl::StatusOr<std::optional<TarMember>> TarReader::Next() {
  if (state_->done.has_value()) {
    if (state_->done->ok()) return std::nullopt;
    return *state_->done;
  }
  absl::StatusOr<std::optional<TarMember>> result = state_->ReadNext();
  if (!result.ok()) {
    state_->done = result.status();
  } else if (!result->has_value()) {
    state_->done = absl::OkStatus();
  }
  return result;
}

const std::string& TarReader::url() const { return state_->stream->url(); }
const std::string& TarReader::failed_member() const { return state_->failed_name; }

}  // namespace wds
