// Collation: a list of samples -> one batch, as the reference package's
// default_collation_fn does, into pooled (optionally pinned) memory.
//
//   wds::Pipeline p = ds.Decode(...).ToTuple({"jpg", "cls"}).Batched(64);
//   // each item: a tuple (uint8 [64, H, W, 3], int64 [64])
//
//   wds::BatchOptions speech{.pad = true};
//   ds.Decode().Batched(32, speech);
//   // "npy": float32 [32, max T, 80] zero-padded; "npy.lengths": int64 [32, 2]
//
// Rules, per field (tuples position by position, dicts field by field with the
// fields of the batch's first sample, in its order; every sample must have the
// same set of fields):
//   int64                       -> Array int64 [B]
//   double (or int64 and double mixed) -> Array float64 [B]
//   Array, equal dtype and shape -> Array [B, ...] (one contiguous block)
//   std::string (e.g. __key__)  -> TextList
//   Buffer (undecoded bytes)    -> BytesList
// Anything else (values of different kinds, arrays of different dtypes or
// ranks, lists) is InvalidArgument naming the field and the sample's key.
// Arrays of different shapes are InvalidArgument naming the field and both
// shapes, unless `pad` is set.
//
// Padding: with `pad`, every array field is padded to the largest size of each
// dimension in the batch, filled with pad_value (converted to the dtype), and
// a field "<name>.lengths" (int64 [B, rank]: row i is sample i's own shape) is
// added for each array field, after all the sample's fields in field order.
// For tuples these are extra positions at the end: (x, y) with array x gives
// (x, y, x.lengths). Padding never changes a batch's field set: lengths exist
// even when every shape happens to agree.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "wds/base/error.h"
#include "wds/base/sample.h"
#include "wds/base/stage.h"

namespace wds {

// Batch is what Batched yields: a Sample whose fields hold collated values.
using Batch = Sample;

// kLengthsSuffix names the lengths field of a padded array field.
inline constexpr std::string_view kLengthsSuffix = ".lengths";

struct BatchOptions {
  // partial: yield the last batch of the stream when the stream ended before
  // it was complete (the reference's default). A batch closed by a budget
  // counts as complete.
  bool partial = true;
  // pad: pad array fields of different shapes instead of failing (see above).
  bool pad = false;
  double pad_value = 0.0;
  // Dynamic batching: a batch closes before the sample that would take it over
  // a budget (a sample that alone exceeds it forms a batch of one). Elements
  // count the samples' array fields as collated (padded to the batch's largest
  // shape, which is what the batch really holds); bytes count that array
  // storage plus 8 per number and the size of each text or bytes value.
  // batch_size still caps the count; with a budget it may be 0 (no count limit).
  std::optional<int64_t> max_elements;
  std::optional<int64_t> max_bytes;
  // handler receives collation errors (stage "batched"); a batch that fails is
  // dropped whole.
  Handler handler = Handler::kReraise;
};

// BatchedStage collates groups of `batch_size` samples into batches by the
// rules above. Array storage comes from the WorkerContext's pool, or a pool
// the stream owns. batch_size 0 without a budget makes it a FailingStage
// (InvalidArgument).
StageFactory BatchedStage(size_t batch_size, BatchOptions options = {});

}  // namespace wds
