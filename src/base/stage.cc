#include "wds/base/stage.h"

#include "base/handlers.h"

namespace wds {
namespace {

class ErrorStreamImpl : public SampleStream {
 public:
  explicit ErrorStreamImpl(absl::Status error) : error_(std::move(error)) {}
  SampleResult Next() override { return error_; }

 private:
  absl::Status error_;
};

}  // namespace

ErrorAction WorkerContext::Handle(Handler handler, std::string_view stage,
                                  const absl::Status& error) const {
  return ApplyHandler(handler, stage, error, errors.get(), warn);
}

std::unique_ptr<SampleStream> ErrorStream(absl::Status error) {
  return std::make_unique<ErrorStreamImpl>(std::move(error));
}

StageFactory FailingStage(absl::Status error) {
  return [error = std::move(error)](const StreamFactory&, const WorkerContext&) {
    return ErrorStream(error);
  };
}

}  // namespace wds
