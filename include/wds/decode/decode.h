// Field decoding: bytes -> typed values, chosen by the field's extension (the
// part after its last dot: "seg.cls" decodes as "cls").
//
// BasicDecoders handles:
//   cls cls2 class count index inx id   -> int64 (ASCII integer, surrounding
//                                          whitespace allowed)
//   txt text transcript                 -> string (must be valid UTF-8)
//   json jsn                            -> string (the JSON text, unparsed, but
//                                          checked: one value as Python's strict
//                                          json.loads reads it)
//   npy                                 -> Array (see npy.h; no pickle)
// Anything else stays bytes. Fields named like "__key__" are never decoded.
// A decoder's error comes back naming the URL, key and field, marked
// ErrorKind::kFieldDecode with that site (wds/base/error_kind.h).
//
// Compressed fields: a field whose last extension is "gz" (gzip) or "zst"
// (zstd), e.g. "txt.gz" or "npy.zst", is decompressed first and then decoded
// by the rest of its name ("txt", "npy") with the same decoders; if none
// accepts it, the value is the decompressed bytes. As in the reference (its
// gzfilter), the field keeps its name ("txt.gz") and one suffix is removed:
// "x.gz.gz" holds the once-decompressed bytes. Corrupt or truncated
// compressed data is DataLoss; output beyond max_decompressed_bytes is
// ResourceExhausted.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "wds/base/buffer.h"
#include "wds/base/error.h"
#include "wds/base/random.h"
#include "wds/base/sample.h"
#include "wds/base/stage.h"

namespace wds {

// DecodeContext is what a decoder may use besides the field's bytes.
struct DecodeContext {
  // key is the sample's __key__ (for messages).
  std::string_view key;
  // rng belongs to the decoding stream (random crops and flips draw from it);
  // the Decode stage seeds it by DeriveSeed(seed, {kDecode, epoch, pass, rank,
  // worker}), so augmentations are reproducible. Never null.
  Rng* rng = nullptr;
  // worker is the context of the stream that decodes the sample (its rank,
  // epoch, ...); null when DecodeSample is called outside a stream. The
  // library's image decoder finds there the slots a downstream Batched offers
  // for the decoded arrays.
  const WorkerContext* worker = nullptr;
  // url is the sample's __url__ (for messages); empty when it has none.
  std::string_view url;
};

// FieldDecoder decodes one field: nullopt declines (the next decoder is
// tried), a Value replaces the bytes, an error goes to the stage's handler
// with the URL, key and field named. Decoders are shared by every worker's
// stream: they must be thread-safe (keep per-stream state in DecodeContext).
using FieldDecoder = std::function<absl::StatusOr<std::optional<Value>>(
    std::string_view field, const Buffer& data, DecodeContext& ctx)>;

struct DecodeOptions {
  // only: decode just these fields (empty: all).
  std::vector<std::string> only;
  // partial: as in the reference, a selected field that is no longer bytes
  // (decoded by an earlier stage) passes through untouched; without partial
  // it is a FailedPrecondition error. Either way a field that no decoder
  // accepts stays bytes.
  bool partial = false;
  // max_decompressed_bytes bounds what one compressed field may expand to, so
  // that a hostile file cannot exhaust memory (256 MiB: a field of 1 GiB of
  // zeros, 1 MB as gzip, fails at 256 MiB). The output grows as it is
  // produced; memory never runs ahead of the decompressed bytes by more than
  // one doubling.
  size_t max_decompressed_bytes = size_t{256} << 20;
  Handler handler = Handler::kReraise;
};

// FieldExtension returns the part of `field` after its last dot.
std::string_view FieldExtension(std::string_view field);

std::vector<FieldDecoder> BasicDecoders();

// DecodeStage decodes each sample with DecodeSample: the first of `decoders`
// that accepts a field decodes it. Random choices draw from a generator
// seeded by DeriveSeed(seed, {kDecode, epoch, pass, rank, worker}); decoded
// arrays are written into the slots a downstream Batched offers. Errors go to options.handler
// (stage "decode"). An empty decoder makes it a FailingStage.
StageFactory DecodeStage(std::vector<FieldDecoder> decoders = BasicDecoders(),
                         DecodeOptions options = {});

// DecodeSample applies `decoders` to every eligible field of `sample`, drawing
// any randomness from `rng`; `worker` (may be null) is handed to them as
// DecodeContext::worker.
[[nodiscard]] absl::Status DecodeSample(Sample& sample, const std::vector<FieldDecoder>& decoders,
                                        const DecodeOptions& options, Rng& rng,
                                        const WorkerContext* worker = nullptr);

}  // namespace wds
