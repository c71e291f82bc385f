// Field decoding with the basic decoders: cls, txt, json, npy, and .gz / .zst
// wrapped fields (inflated, then decoded by the rest of the name). The first
// byte chooses the field name.
#include <cstddef>
#include <cstdint>
#include <string>

#include "wds/base/random.h"
#include "wds/base/sample.h"
#include "wds/decode/decode.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  static const char* const kFields[] = {"cls",    "txt",     "json",     "npy",     "cls.gz",
                                        "txt.gz", "npy.zst", "json.zst", "x.gz.gz", "id"};
  static const std::vector<wds::FieldDecoder> decoders = wds::BasicDecoders();
  wds::Sample sample;
  sample.Append("__key__", std::string("k"));
  sample.Append(kFields[data[0] % 10], wds::Buffer::Copy(std::string_view(
                                           reinterpret_cast<const char*>(data) + 1, size - 1)));
  wds::DecodeOptions options;
  // 1 MiB: enough to cross the limit and reach every decoder, small enough
  // that a self-made bomb costs a millisecond, not the run.
  options.max_decompressed_bytes = size_t{1} << 20;
  wds::Rng rng(1);
  (void)wds::DecodeSample(sample, decoders, options, rng);
  return 0;
}
