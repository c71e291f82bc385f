// IndexedShard: positioned reads of a local tar's members, checked against
// their headers.
#include "wds/tar/indexed_shard.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "io/file_stream.h"
#include "tar/index_lookup.h"
#include "tar/tar_header.h"
#include "tar/tar_samples.h"
#include "wds/internal/base/status_macros.h"
#include "wds/internal/base/strings.h"
#include "wds/internal/tar/shard_scan.h"

namespace wds {
namespace {

constexpr int64_t kBlock = 512;
// What a remote shard's index is kept as in the cache (RemoteOpener::Keep).
constexpr std::string_view kKeptIndex = "index";

// Compression names the compression whose magic number starts `head`, or
// returns nullopt (a tar's first bytes are a member name).
std::optional<std::string_view> Compression(std::string_view head) {
  struct Magic {
    std::string_view bytes;
    std::string_view name;
  };
  static constexpr Magic kMagics[] = {
      {"\x1f\x8b", "gzip"},
      {"BZh", "bzip2"},
      {"\xfd"
       "7zXZ\x00",
       "xz"},
      {"\x28\xb5\x2f\xfd", "zstd"},
      {"\x04\x22\x4d\x18", "lz4"},
      {"\x5d\x00\x00", "lzma"},
  };
  for (const Magic& m : kMagics) {
    if (StartsWith(head, m.bytes)) return m.name;
  }
  return std::nullopt;
}

// FieldText is a NUL-terminated header field.
std::string_view FieldText(const unsigned char* field, size_t width) {
  const char* text = reinterpret_cast<const char*>(field);
  return std::string_view(text, strnlen(text, width));
}

bool Ascii(std::string_view s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

// HeaderFits says whether `header` can be the header of `member`: a valid
// header announcing its size and, for a short ASCII name, which every writer
// puts in the header as it is (POSIX ustar's prefix and name), that name.
// Longer or other names live in a pax or GNU record before the header, which
// holds a shortened form. (Writers put a size in a pax record, and 0 in the
// header, only where it does not fit the header: from 8 GiB, beyond any
// member this library reads.)
bool HeaderFits(const unsigned char* header, const IndexMember& member) {
  constexpr size_t kSizeField = 124, kSizeWidth = 12, kNameWidth = 100, kMagic = 257,
                   kPrefixField = 345, kPrefixWidth = 155;
  if (!ValidTarHeader(header)) return false;
  if (TarHeaderNumber(header + kSizeField, kSizeWidth) != member.size) return false;
  if (member.name.size() > kNameWidth || !Ascii(member.name)) return true;
  std::string name(FieldText(header, kNameWidth));
  // GNU headers ("ustar  ") keep times where POSIX ones keep the prefix.
  const bool posix = std::memcmp(header + kMagic, "ustar\0", 6) == 0;
  std::string_view prefix = posix ? FieldText(header + kPrefixField, kPrefixWidth) : "";
  if (!prefix.empty()) name = Cat(prefix, EndsWith(prefix, "/") ? "" : "/", name);
  return name == member.name;
}

// PreadFully reads iov's bytes at `offset`; false at end of file.
absl::StatusOr<bool> PreadFully(int fd, iovec* iov, int count, int64_t offset) {
  while (count > 0) {
    const ssize_t n = preadv(fd, iov, count, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::ErrnoToStatus(errno, "read failed");
    }
    if (n == 0) return false;
    offset += n;
    size_t rest = static_cast<size_t>(n);
    while (count > 0 && rest >= iov->iov_len) {
      rest -= iov->iov_len;
      ++iov;
      --count;
    }
    if (count > 0) {
      iov->iov_base = static_cast<char*>(iov->iov_base) + rest;
      iov->iov_len -= rest;
    }
  }
  return true;
}

absl::Status NotLocal(std::string_view url) {
  return absl::InvalidArgumentError(
      Cat(url, ": random access reads local files; fetch a remote shard first"));
}

bool NamesEveryMember(const ShardIndex& index) {
  for (const IndexSample& s : index.samples) {
    for (const IndexMember& m : s.members) {
      if (m.name.empty()) return false;
    }
  }
  return true;
}

absl::Status CompressionError(std::string_view url, const unsigned char* head, bool complete) {
  std::optional<std::string_view> compression;
  if (!complete || !ValidTarHeader(head)) {
    compression = Compression({reinterpret_cast<const char*>(head), kBlock});
  }
  if (!compression.has_value()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      Cat(url, ": a ", *compression, "-compressed tar; random access needs an uncompressed one"));
}

// CheckInside says whether every member of `index` lies inside the `size`
// bytes (-1: unknown) of the shard `url`, whose index came from `sidecar`.
absl::Status CheckInside(const ShardIndex& index, int64_t size, std::string_view sidecar,
                         std::string_view url) {
  for (const IndexSample& s : index.samples) {
    for (const IndexMember& m : s.members) {
      if (m.offset < kBlock || (size >= 0 && (m.offset > size || m.size > size - m.offset))) {
        return absl::DataLossError(Cat(sidecar, ": member ", m.name, " at offset ", m.offset, " (",
                                       m.size, " bytes) lies outside ", url, " (", size,
                                       " bytes); is the sidecar from another version?"));
      }
    }
  }
  return absl::OkStatus();
}

// FirstHeaderFits says whether `head`, a tar's first block, fits the member
// of `index` whose header it is (the one whose data starts at offset 512),
// when the index lists that member (a metadata member is not listed).
bool FirstHeaderFits(const ShardIndex& index, const unsigned char* head) {
  for (const IndexSample& s : index.samples) {
    for (const IndexMember& m : s.members) {
      if (m.offset == kBlock) return HeaderFits(head, m);
    }
  }
  return true;
}

// WithoutUrl is `message` without a leading "<url>: ".
std::string_view WithoutUrl(std::string_view message, std::string_view url) {
  if (StartsWith(message, url) && StartsWith(message.substr(url.size()), ": ")) {
    message.remove_prefix(url.size() + 2);
  }
  return message;
}

// RemoteIndex is the index of a remote shard: its sidecar when the server
// has one naming every member, else a scan of the whole object.
absl::StatusOr<ShardIndex> RemoteIndex(std::string_view url, const Opener& opener) {
  WDS_ASSIGN_OR_RETURN(std::optional<ShardIndex> sidecar, RemoteSidecar(url, opener));
  if (sidecar.has_value() && NamesEveryMember(*sidecar)) return *std::move(sidecar);
  WDS_ASSIGN_OR_RETURN(std::unique_ptr<ByteStream> stream, opener(url));
  return ScanStream(std::move(stream));
}

}  // namespace

absl::StatusOr<std::unique_ptr<IndexedShard>> IndexedShard::Open(std::string_view url) {
  std::optional<std::string> path = LocalPath(url);
  if (!path.has_value()) return NotLocal(url);
  const int fd = open(path->c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::ErrnoToStatus(errno, Cat(url, ": cannot open"));
  return Open(url, fd);
}

absl::StatusOr<std::unique_ptr<IndexedShard>> IndexedShard::Open(std::string_view url, int fd) {
  std::unique_ptr<IndexedShard> shard(new IndexedShard(std::string(url), fd));
  std::optional<std::string> path = LocalPath(url);
  if (!path.has_value()) return NotLocal(url);
  struct stat st;
  if (fstat(fd, &st) != 0) return absl::ErrnoToStatus(errno, Cat(url, ": cannot stat"));
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(Cat(url, ": random access needs a regular file"));
  }

  // A tar starts with a valid header (whose first bytes are a name, which
  // may look like a magic number); anything else is sniffed for one.
  unsigned char head[kBlock] = {};
  iovec iov{head, sizeof head};
  absl::StatusOr<bool> read = PreadFully(fd, &iov, 1, 0);
  if (!read.ok()) {
    return absl::Status(read.status().code(), Cat(url, ": ", read.status().message()));
  }
  WDS_RETURN_IF_ERROR(CompressionError(url, head, *read));

  const std::string sidecar = IndexPath(*path);
  absl::StatusOr<ShardIndex> index = absl::NotFoundError("");
  if (access(sidecar.c_str(), F_OK) == 0) {
    index = ShardIndex::Load(sidecar);
    if (index.ok() && !NamesEveryMember(*index)) index = absl::NotFoundError("");  // DALI v1.1
  }
  if (absl::IsNotFound(index.status())) {
    // The scan reads this very file, through a descriptor of its own.
    UniqueFd scan_fd(fcntl(fd, F_DUPFD_CLOEXEC, 0));
    if (!scan_fd.valid() || lseek(scan_fd.get(), 0, SEEK_SET) != 0) {
      return absl::ErrnoToStatus(errno, Cat(url, ": cannot read it from its start"));
    }
    index = ScanStream(MakeFileStream(std::string(url), std::move(scan_fd), st.st_size));
  }
  WDS_RETURN_IF_ERROR(index.status());
  WDS_RETURN_IF_ERROR(CheckInside(*index, st.st_size, sidecar, url));
  shard->index_ = *std::move(index);
  return shard;
}

absl::StatusOr<std::unique_ptr<IndexedShard>> IndexedShard::Open(std::string_view url,
                                                                 const RemoteOpener& remote) {
  if (!IsRemoteUrl(url)) return Open(url);
  std::unique_ptr<IndexedShard> shard(new IndexedShard(std::string(url), -1));
  shard->remote_ = remote;
  unsigned char head[kBlock] = {};
  const absl::Span<char> first(reinterpret_cast<char*>(head), kBlock);
  // (Every tar holds a block at least: a shorter object fails here.) The
  // version this read finds is the one every later read asks for.
  WDS_ASSIGN_OR_RETURN(shard->version_, remote.ReadRange(url, 0, {first}));
  WDS_RETURN_IF_ERROR(CompressionError(url, head, true));
  // The index the cache keeps for this version of the shard, else the
  // server's (never a cached copy of the sidecar or the shard, which may be
  // of another version), then kept for the next process.
  if (std::optional<std::string> kept = remote.Kept(url, kKeptIndex, shard->version_)) {
    absl::StatusOr<ShardIndex> index = ShardIndex::Parse(*kept, url);
    if (index.ok() && CheckInside(*index, shard->version_.size, url, url).ok() &&
        FirstHeaderFits(*index, head)) {
      shard->index_ = *std::move(index);
      return shard;
    }
    remote.Forget(url, kKeptIndex);
  }
  WDS_ASSIGN_OR_RETURN(shard->index_, RemoteIndex(url, remote.AsUncachedOpener()));
  WDS_RETURN_IF_ERROR(CheckInside(shard->index_, shard->version_.size, SidecarUrl(url), url));
  if (remote.keeps()) {
    if (absl::StatusOr<std::string> text = shard->index_.ToText(); text.ok()) {
      remote.Keep(url, kKeptIndex, shard->version_, *text);
    }
  }
  return shard;
}

IndexedShard::IndexedShard(std::string url, int fd) : url_(std::move(url)), fd_(fd) {}

std::unique_ptr<IndexedShard> IndexedShard::ForOpener(const RemoteOpener& remote) const {
  std::unique_ptr<IndexedShard> copy(new IndexedShard(url_, -1));
  copy->index_ = index_;
  copy->version_ = version_;
  copy->remote_ = remote;
  return copy;
}

IndexedShard::~IndexedShard() {
  if (fd_ >= 0) close(fd_);
}

std::string_view IndexedShard::Key(int64_t i) const {
  const IndexMember& m = index_.samples[static_cast<size_t>(i)].members.front();
  return std::string_view(m.name).substr(0, m.name.size() - m.field.size() - 1);
}

absl::Status IndexedShard::CheckIndices(int64_t i, size_t j) const {
  if (i < 0 || i >= size()) {
    return absl::OutOfRangeError(Cat(url_, ": sample ", i, " of ", size()));
  }
  const IndexSample& sample = index_.samples[static_cast<size_t>(i)];
  if (j >= sample.members.size()) {
    return absl::OutOfRangeError(
        Cat(url_, ": member ", j, " of sample ", i, ", which has ", sample.members.size()));
  }
  return absl::OkStatus();
}

absl::Status IndexedShard::CheckHeader(const unsigned char* header, const IndexMember& m) const {
  if (HeaderFits(header, m)) return absl::OkStatus();
  return absl::DataLossError(Cat(url_, ": the tar header before member ", m.name, " at offset ",
                                 m.offset, " is not that member's (", m.size,
                                 " bytes); is the index from another version of the shard?"));
}

absl::Status IndexedShard::ReadRemote(int64_t i, size_t first, size_t last,
                                      char* const* dests) const {
  const IndexSample& s = index_.samples[static_cast<size_t>(i)];
  const int64_t start = s.members[first].offset - kBlock;
  std::vector<std::array<unsigned char, kBlock>> headers(last - first + 1);
  int64_t gap = 0;
  for (size_t j = first + 1; j <= last; ++j) {
    const IndexMember& previous = s.members[j - 1];
    gap = std::max(gap, s.members[j].offset - kBlock - previous.offset - previous.size);
  }
  std::vector<char> dropped(static_cast<size_t>(gap));
  std::vector<absl::Span<char>> parts;
  parts.reserve(3 * headers.size());
  int64_t position = start;
  for (size_t j = first; j <= last; ++j) {
    const IndexMember& m = s.members[j];
    const int64_t skip = m.offset - kBlock - position;
    if (skip > 0) parts.emplace_back(dropped.data(), static_cast<size_t>(skip));
    parts.emplace_back(reinterpret_cast<char*>(headers[j - first].data()), kBlock);
    parts.emplace_back(dests[j - first], static_cast<size_t>(m.size));
    position = m.offset + m.size;
  }
  absl::StatusOr<ObjectVersion> read = remote_->ReadRange(url_, start, parts, version_);
  if (!read.ok()) {
    const IndexMember& m = s.members[first];
    return absl::Status(read.status().code(),
                        Cat(url_, ": member ", m.name, " at offset ", m.offset, ": ",
                            WithoutUrl(ToStd(read.status().message()), url_)));
  }
  for (size_t j = first; j <= last; ++j) {
    absl::Status header = CheckHeader(headers[j - first].data(), s.members[j]);
    if (!header.ok()) {
      // A kept index that proved wrong (a sidecar mended since it was kept)
      // is not offered to the next opening.
      remote_->Forget(url_, kKeptIndex);
      return header;
    }
  }
  return absl::OkStatus();
}

absl::Status IndexedShard::ReadMembers(int64_t i, absl::Span<char* const> dests) const {
  WDS_RETURN_IF_ERROR(CheckIndices(i, 0));
  const IndexSample& s = index_.samples[static_cast<size_t>(i)];
  if (dests.size() != s.members.size()) {
    return absl::InvalidArgumentError(
        Cat(url_, ": sample ", i, " has ", s.members.size(), " members, not ", dests.size()));
  }
  if (!remote()) {
    for (size_t j = 0; j < dests.size(); ++j) WDS_RETURN_IF_ERROR(ReadMember(i, j, dests[j]));
    return absl::OkStatus();
  }
  size_t first = 0;
  for (size_t j = 1; j <= dests.size(); ++j) {
    if (j < dests.size()) {
      const IndexMember& previous = s.members[j - 1];
      const int64_t gap = s.members[j].offset - kBlock - previous.offset - previous.size;
      if (gap >= 0 && gap <= kMaxGap) continue;
    }
    WDS_RETURN_IF_ERROR(ReadRemote(i, first, j - 1, dests.data() + first));
    first = j;
  }
  return absl::OkStatus();
}

absl::Status IndexedShard::ReadMember(int64_t i, size_t j, char* dest) const {
  WDS_RETURN_IF_ERROR(CheckIndices(i, j));
  if (remote()) return ReadRemote(i, j, j, &dest);
  const IndexMember& m = index_.samples[static_cast<size_t>(i)].members[j];
  unsigned char header[kBlock];
  iovec iov[2] = {{header, sizeof header}, {dest, static_cast<size_t>(m.size)}};
  absl::StatusOr<bool> read = PreadFully(fd_, iov, 2, m.offset - kBlock);
  if (!read.ok()) {
    return absl::Status(read.status().code(), Cat(url_, ": member ", m.name, " at offset ",
                                                  m.offset, ": ", read.status().message()));
  }
  if (!*read) {
    return absl::DataLossError(
        Cat(url_, ": member ", m.name, " at offset ", m.offset, " is truncated"));
  }
  return CheckHeader(header, m);
}

absl::StatusOr<Sample> IndexedShard::Read(int64_t i) const {
  if (i < 0 || i >= size()) {
    return absl::OutOfRangeError(Cat(url_, ": sample ", i, " of ", size()));
  }
  const IndexSample& s = index_.samples[static_cast<size_t>(i)];
  Sample sample;
  sample.Reserve(2 + s.members.size());
  sample.Append(std::string(kKeyField), std::string(Key(i)));
  sample.Append(std::string(kUrlField), url_);
  std::vector<Buffer> data;
  std::vector<char*> dests;
  data.reserve(s.members.size());
  dests.reserve(s.members.size());
  for (const IndexMember& m : s.members) {
    data.push_back(Buffer::Allocate(static_cast<size_t>(m.size)));
    dests.push_back(reinterpret_cast<char*>(data.back().mutable_data()));
  }
  WDS_RETURN_IF_ERROR(ReadMembers(i, dests));
  std::string field;
  for (size_t j = 0; j < s.members.size(); ++j) {
    const IndexMember& m = s.members[j];
    // The offset of its header, as the streaming reader names members.
    WDS_RETURN_IF_ERROR(AppendMemberField(sample, m.field, std::move(data[j]), url_, m.name,
                                          m.offset - kBlock, field));
  }
  return sample;
}

}  // namespace wds
