// Inputs of `wds-shard create`: where samples come from before they are
// written to shards.
//
//   tree         a directory tree: every regular file is a member; its key is
//                the relative path up to the first dot of the basename, its
//                field the rest ("img/a.seg.png" -> key "img/a", field
//                "seg.png"). Samples in byte order of their keys.
//   imagefolder  torchvision's layout ROOT/<class>/.../<file>: as a tree,
//                plus a "cls" field holding the class index, classes being
//                the sorted names of ROOT's subdirectories.
//   tsv          a listing, one sample per line: KEY<TAB>FIELD=PATH<TAB>...
//                (empty lines and lines starting with '#' are skipped).
//   jsonl        a listing, one JSON object per line: {"__key__": KEY,
//                FIELD: PATH, ...}; an integer or a floating-point value is
//                the field's content itself (as decimal text).
//   tar          tar shards (any URL the reader opens; "-" is standard
//                input), regrouped by key: re-sharding. Member names are
//                kept as they are.
// Listing paths are relative to the listing's directory. Names starting with
// '.' are skipped in directory trees. Samples from files are listed, checked
// (readable, no field twice in one key, no key twice) before any shard is
// written; their bytes are read only when written.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "wds/base/buffer.h"
#include "wds/base/sample.h"

namespace wds::tools {

enum class InputFormat { kAuto, kTree, kImageFolder, kTsv, kJsonl, kTar };

[[nodiscard]] absl::StatusOr<InputFormat> ParseInputFormat(std::string_view name);

// FieldSource is one member of a sample to write: bytes in a file (`path`)
// or in memory (`data`).
struct FieldSource {
  // field as it appears in the member name (case kept).
  std::string field;
  std::string path;
  Buffer data;
  int64_t size = 0;
  // origin names where in-memory bytes came from, for messages.
  std::string origin;
};

struct SampleSource {
  std::string key;
  // fields, sorted by name as the writer orders them.
  std::vector<FieldSource> fields;
  // Footprint bounds the sample's uncompressed tar bytes (MemberFootprint).
  int64_t Footprint() const;
  int64_t DataBytes() const;
};

class SampleInput {
 public:
  virtual ~SampleInput() = default;
  // Next returns the next sample, nullopt at the end.
  [[nodiscard]] virtual absl::StatusOr<std::optional<SampleSource>> Next() = 0;
  // total is the number of samples when known before reading, else -1.
  virtual int64_t total() const { return -1; }
  // notes reports what the input skipped, for the summary ("" if nothing).
  virtual std::string notes() const { return ""; }
};

struct Input {
  std::unique_ptr<SampleInput> samples;
  // classes are the ImageFolder class names, by index.
  std::vector<std::string> classes;
};

// OpenInput opens `inputs` in `format` (kAuto: "-" or a tar name -> tar, a
// directory -> tree, *.tsv -> tsv, *.jsonl / *.ndjson -> jsonl). Only tar
// takes several inputs. An input without samples is InvalidArgument naming
// it.
[[nodiscard]] absl::StatusOr<Input> OpenInput(InputFormat format,
                                              const std::vector<std::string>& inputs);

// VectorInput serves samples already listed.
std::unique_ptr<SampleInput> VectorInput(std::vector<SampleSource> samples, std::string notes);

// LoadSample reads the sample's files: a Sample with __key__ and one bytes
// field per member. A file whose size changed since it was listed is
// DataLoss naming it.
[[nodiscard]] absl::StatusOr<Sample> LoadSample(const SampleSource& source);

}  // namespace wds::tools
