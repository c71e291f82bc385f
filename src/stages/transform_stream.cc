#include "stages/transform_stream.h"

#include <utility>

#include "wds/internal/base/strings.h"

namespace wds {

TransformStream::TransformStream(std::unique_ptr<SampleStream> upstream, WorkerContext ctx,
                                 std::string stage, Handler handler)
    : upstream_(std::move(upstream)),
      ctx_(std::move(ctx)),
      stage_(std::move(stage)),
      handler_(handler) {}

SampleResult TransformStream::Next() {
  if (!error_.ok()) return error_;
  while (!stopped_) {
    SampleResult item = upstream_->Next();
    if (!item.ok() || !item->has_value()) return item;
    absl::StatusOr<bool> keep = Apply(**item);
    if (keep.ok()) {
      if (*keep) return item;
      continue;
    }
    switch (ctx_.Handle(handler_, stage_, keep.status())) {
      case ErrorAction::kRaise:
        error_ = keep.status();
        return error_;
      case ErrorAction::kContinue:
        break;
      case ErrorAction::kStop:
        stopped_ = true;
        break;
    }
  }
  return std::nullopt;
}

absl::Status SampleError(absl::StatusCode code, std::string_view url, std::string_view key,
                         std::string_view detail) {
  if (url.empty()) return absl::Status(code, Cat("key ", key, ": ", detail));
  return absl::Status(code, Cat(url, ": key ", key, ": ", detail));
}

std::string FieldNames(const Sample& sample) {
  std::string names;
  for (const Sample::Field& field : sample) {
    if (!names.empty()) names.append(", ");
    names.append(field.first);
  }
  return names;
}

}  // namespace wds
