// The per-sample stages: shuffle, map, select, rename, to_tuple, slice and
// repeat, each as a StageFactory that any recipe can append.
//
//   wds::Pipeline p = source.Then(wds::ShuffleStage(1000))
//                           .Then(wds::ToTupleStage({"jpg;png", "cls"}));
//   // the same as source.Shuffle(1000).ToTuple({"jpg;png", "cls"})
//
// A stage that cannot be set up (an empty function, a malformed field spec, a
// negative count) is a FailingStage: every Next() of its stream returns the
// InvalidArgument error naming the stage and the bad option.
//
// Thread safety: a StageFactory may be opened concurrently by any number of
// workers; the functions given to MapStage and SelectStage are shared by all
// of them and must be thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "wds/base/error.h"
#include "wds/base/sample.h"
#include "wds/base/stage.h"

namespace wds {

// ShuffleStage keeps a buffer of `bufsize` samples and yields a random one once
// it holds `initial` (the reference package's algorithm), seeded per
// (seed, epoch, pass, rank, worker). bufsize < 2 leaves the order alone. An
// upstream error is returned at once; the buffered samples are dropped.
StageFactory ShuffleStage(size_t bufsize, size_t initial = 100);

// MapStage replaces each sample by fn(sample); an error goes to `handler`. As
// in the reference, a non-tuple result gets the input's "__key__" back.
StageFactory MapStage(std::function<absl::StatusOr<Sample>(Sample)> fn,
                      Handler handler = Handler::kReraise);

// SelectStage keeps the samples for which `predicate` is true.
StageFactory SelectStage(std::function<bool(const Sample&)> predicate);

// RenameStage sets each new field to the first present field among its
// ';'-separated alternatives ({"image", "jpg;png"}). Every listed alternative
// is removed, "__key__" too when listed; with keep = false every field not
// named is dropped, "__key__" and "__url__" too (both as in the reference). A
// sample with none of the alternatives goes to `handler` (NotFound).
StageFactory RenameStage(std::vector<std::pair<std::string, std::string>> renames, bool keep = true,
                         Handler handler = Handler::kReraise);

// MissingField says what ToTupleStage does with a sample that lacks a field.
enum class MissingField { kError, kSkip, kEmpty };
// ParseMissingField accepts "error", "skip" and "empty".
[[nodiscard]] absl::StatusOr<MissingField> ParseMissingField(std::string_view name);

// ToTupleStage keeps exactly `fields` in that order (each may list ';'
// alternatives); the result is a tuple sample. A missing field follows
// `missing`: an error to `handler`, skip the sample, or an empty bytes value.
StageFactory ToTupleStage(std::vector<std::string> fields,
                          MissingField missing = MissingField::kError,
                          Handler handler = Handler::kReraise);

// SliceStage yields items start, start + step, ... below stop (Python's
// islice, including how far it reads).
StageFactory SliceStage(int64_t start, std::optional<int64_t> stop, int64_t step = 1);

// RepeatStage re-opens the upstream as a fresh pass `count` times in all
// (nullopt: forever). A pass that yields nothing ends the repetition.
StageFactory RepeatStage(std::optional<int64_t> count);

}  // namespace wds
