// TarWriter: writes WebDataset samples as tar members "key.field".
//
//   absl::StatusOr<std::unique_ptr<wds::TarWriter>> w = wds::TarWriter::Create("out/a.tar");
//   wds::Sample s;  s.Set("__key__", std::string("000001"));  s.Set("cls", int64_t{3});
//   (*w)->Write(s);        // member "000001.cls" holding "3"
//   (*w)->Close();
//
// Output is reproducible: members carry a fixed mtime, mode 0444, uid/gid 0 and
// owner "bigdata" (as the reference writer), fields in sorted order, so the
// same samples give byte-identical shards. Readers: this library, the
// reference Python package, GNU tar, bsdtar.
// Thread safety: one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "wds/sample.h"

struct archive;  // libarchive's handle

namespace wds {

enum class TarCompression { kNone, kGzip, kZstd };

struct TarWriterOptions {
  TarCompression compression = TarCompression::kNone;
  // level: compressor level; -1 keeps the compressor's default.
  int level = -1;
  // mtime stamped on every member (seconds since the epoch).
  int64_t mtime = 0;
};

class TarWriter {
 public:
  // Create truncates or creates `path`.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<TarWriter>> Create(
      const std::string& path, TarWriterOptions options = {});
  // The destructor closes an unclosed writer, ignoring errors: call Close().
  ~TarWriter();

  // WriteMember writes one regular-file member.
  [[nodiscard]] absl::Status WriteMember(std::string_view name, std::string_view data);
  // Write writes `sample` as members "<__key__>.<field>", fields sorted by
  // name; fields starting with '_' are skipped. Bytes are written as they are,
  // strings as UTF-8 text, integers and doubles as decimal text. A sample
  // without a text __key__ is InvalidArgument.
  [[nodiscard]] absl::Status Write(const Sample& sample);
  // Close writes the end-of-archive blocks and flushes the file.
  [[nodiscard]] absl::Status Close();

  // bytes_written counts member data bytes (not headers).
  int64_t bytes_written() const { return bytes_written_; }
  const std::string& path() const { return path_; }

 private:
  TarWriter(std::string path, TarWriterOptions options, ::archive* archive);

  std::string path_;
  TarWriterOptions options_;
  ::archive* archive_;
  int64_t bytes_written_ = 0;
};

}  // namespace wds
