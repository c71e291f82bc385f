// Shard indexes: per-shard member offsets and per-dataset sample counts.
//
// A ShardIndex lists, per sample, each member's field, data offset, size and
// name. Its text form is NVIDIA DALI's webdataset index (version v1.2, as
// DALI's tools/wds2idx.py writes it), so DALI's fn.readers.webdataset reads
// our shards with index_paths = <shard>.idx:
//
//   v1.2 <num_samples>
//   <ext> <data_offset> <size> <member name> <ext> <data_offset> <size> <member name> ...
//
// one line per sample. Names and extensions are written as GNU `tar --list`
// prints them in a UTF-8 locale: a backslash doubled, a control character as
// a C escape (\t, \n, ...) or three octal digits (\033), other bytes as they
// are (UTF-8 included). Reading also undoes the octal escapes of every byte
// that tar prints in the C locale (\303\251 for "é"), the form in which
// wds2idx, which copies tar's listing, writes non-ASCII names. A name
// holding a space cannot be written. Offsets count bytes of the uncompressed
// tar; DALI itself reads only uncompressed shards. Samples are grouped as this
// library's reader groups them (tar.h): metadata members and names without a
// field are left out, so num_samples is the count a WebDataset pipeline
// yields.
//
// A DatasetIndex is the reference package's shard index (its wids
// "wids-shard-index-v1" JSON), with the keys that package reads:
//
//   {
//     "__kind__": "wids-shard-index-v1",
//     "wids_version": 1,
//     "shardlist": [
//       {"url": "train-000000.tar", "nsamples": 10000, "filesize": 83927040}, ...
//     ]
//   }
//
// Relative URLs are relative to the JSON file's directory, as wids resolves
// them ("." and ".." segments resolved lexically, never above a remote URL's
// host or the root). Loaders use the counts to give every rank the same number of steps:
//
//   absl::StatusOr<int64_t> n = wds::CountSamples("data/train-000003.tar");
//
// Thread safety: values; the functions may run concurrently.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "wds/io/byte_stream.h"

namespace wds {

struct IndexMember {
  // field is the member name after the first dot of its basename, case kept.
  std::string field;
  // offset is where the member's data starts in the uncompressed tar.
  int64_t offset = 0;
  int64_t size = 0;
  std::string name;
  bool operator==(const IndexMember& o) const {
    return field == o.field && offset == o.offset && size == o.size && name == o.name;
  }
  bool operator!=(const IndexMember& o) const { return !(*this == o); }
};

struct IndexSample {
  std::vector<IndexMember> members;
};

struct ShardIndex {
  std::vector<IndexSample> samples;

  // ToText renders the DALI v1.2 text. A member name holding a space, which
  // the format cannot carry, is InvalidArgument naming it.
  [[nodiscard]] absl::StatusOr<std::string> ToText() const;
  // Parse reads DALI text (v1.1, without names, or v1.2); errors are
  // InvalidArgument naming `source` and the line.
  [[nodiscard]] static absl::StatusOr<ShardIndex> Parse(std::string_view text,
                                                        std::string_view source);
  [[nodiscard]] static absl::StatusOr<ShardIndex> Load(const std::string& path);
  // Save writes `path` through a temporary file renamed into place.
  [[nodiscard]] absl::Status Save(const std::string& path) const;
};

// IndexPath names the index sidecar of a shard: "<shard>.idx".
std::string IndexPath(std::string_view shard);

// ScanShard builds the index of `url` (any URL OpenUrl takes) from the tar
// headers alone: member data is skipped (seeked over in a local uncompressed
// file), never read into memory. Errors name the URL and offset.
[[nodiscard]] absl::StatusOr<ShardIndex> ScanShard(std::string_view url);

// CountSamples returns the number of samples of the shard at `url`: from its
// sidecar IndexPath(url) when that exists (only the first line is read),
// otherwise by ScanShard. A sidecar is trusted as it is: `wds-shard verify`
// checks it against its shard.
[[nodiscard]] absl::StatusOr<int64_t> CountSamples(std::string_view url);

// HasSidecar is true when `url` is a local file whose sidecar exists.
bool HasSidecar(std::string_view url);

// IndexOf returns the index of `url`: its sidecar when HasSidecar(url); for
// a remote URL, "<url>.idx" fetched through `opener` when the server has it;
// otherwise a header scan of the stream `opener` opens (for a remote shard, a
// read of the whole object).
[[nodiscard]] absl::StatusOr<ShardIndex> IndexOf(std::string_view url, const Opener& opener);

struct DatasetShard {
  std::string url;
  int64_t nsamples = 0;
  int64_t filesize = 0;
  bool operator==(const DatasetShard& o) const {
    return url == o.url && nsamples == o.nsamples && filesize == o.filesize;
  }
};

struct DatasetIndex {
  std::vector<DatasetShard> shards;

  int64_t total_samples() const;
  // ToJson renders the JSON (two-space indents, keys in the order above).
  std::string ToJson() const;
  // Parse reads the JSON; relative URLs are joined to `base_dir` when it is
  // not empty. A document that is not a wids shard index, or a shard without
  // "url" or "nsamples", is InvalidArgument naming `source`.
  [[nodiscard]] static absl::StatusOr<DatasetIndex> Parse(std::string_view text,
                                                          std::string_view source,
                                                          std::string_view base_dir);
  // Load reads `path`, resolving relative URLs against its directory.
  [[nodiscard]] static absl::StatusOr<DatasetIndex> Load(const std::string& path);
  // Load reads the index at `url` through `opener`: a local path or file:
  // (file://) URL as Load(path) does, anything else (a remote URL, pipe:) from the
  // stream `opener` opens, at most 1 GiB. Relative URLs are joined to a
  // remote URL's directory: the URL up to the last '/' of its path, query
  // dropped ("s3://bucket/train/index.json" -> "s3://bucket/train/"). A null
  // `opener` reads with RemoteOptions::FromEnvironment() without its cache
  // (an index may be replaced under its URL; give an opener without one
  // too). Errors are the opener's, and Parse's naming `url`.
  [[nodiscard]] static absl::StatusOr<DatasetIndex> Load(std::string_view url,
                                                         const Opener& opener);
  // Save writes `path` through a temporary file renamed into place.
  [[nodiscard]] absl::Status Save(const std::string& path) const;
};

}  // namespace wds
