// Internal base for the stages that rewrite samples one at a time and send a
// failing sample to their handler (map, rename, to_tuple, decode), plus the
// shared wording of their error messages.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "wds/base/error.h"
#include "wds/base/sample.h"
#include "wds/base/stage.h"

namespace wds {

// TransformStream pulls from its upstream, applies Apply() to each sample and
// routes Apply()'s errors through `handler` under the name `stage`: kRaise
// makes the error sticky, kContinue drops the sample, kStop ends the stream.
// Upstream errors and the upstream's end pass through unchanged.
class TransformStream : public SampleStream {
 public:
  TransformStream(std::unique_ptr<SampleStream> upstream, WorkerContext ctx, std::string stage,
                  Handler handler);

  SampleResult Next() final;

 protected:
  // Apply rewrites `sample` in place and returns whether to keep it (false
  // drops it silently: an explicit user policy, not an error), or an error
  // for the handler. After an error `sample` is discarded.
  virtual absl::StatusOr<bool> Apply(Sample& sample) = 0;

 private:
  std::unique_ptr<SampleStream> upstream_;
  WorkerContext ctx_;
  std::string stage_;
  Handler handler_;
  absl::Status error_;
  bool stopped_ = false;
};

// SampleError returns an error of `code` whose message names the sample by URL
// and key: "<url>: key <key>: <detail>".
absl::Status SampleError(absl::StatusCode code, std::string_view url, std::string_view key,
                         std::string_view detail);

// FieldNames lists the sample's field names, comma separated, for messages.
std::string FieldNames(const Sample& sample);

}  // namespace wds
