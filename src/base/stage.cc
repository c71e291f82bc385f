#include "wds/stage.h"

namespace wds {
namespace {

class ErrorStreamImpl : public SampleStream {
 public:
  explicit ErrorStreamImpl(absl::Status error) : error_(std::move(error)) {}
  SampleResult Next() override { return error_; }

 private:
  absl::Status error_;
};

class EmptyStreamImpl : public SampleStream {
 public:
  SampleResult Next() override { return std::nullopt; }
};

}  // namespace

ErrorAction WorkerContext::Handle(Handler handler, std::string_view stage,
                                  const absl::Status& error) const {
  return ApplyHandler(handler, stage, error, errors.get(), warn);
}

std::unique_ptr<SampleStream> ErrorStream(absl::Status error) {
  return std::make_unique<ErrorStreamImpl>(std::move(error));
}

std::unique_ptr<SampleStream> EmptyStream() { return std::make_unique<EmptyStreamImpl>(); }

}  // namespace wds
