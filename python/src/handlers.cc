#include "handlers.h"

#include <string>

#include "errors.h"
#include "py_ref.h"
#include "wds/internal/base/strings.h"

namespace wdspy {

StageHandler StageHandler::FromPython(py::handle handler) {
  StageHandler h;
  if (py::isinstance<py::str>(handler)) {
    absl::StatusOr<wds::Handler> parsed = wds::ParseHandler(handler.cast<std::string>());
    ThrowIfError(parsed.status());
    h.native_ = *parsed;
  } else if (PyCallable_Check(handler.ptr())) {
    h.callable_ = std::make_shared<PyRef>(handler);
  } else {
    throw py::type_error("handler must be a handler name or a callable, got " +
                         py::repr(handler).cast<std::string>());
  }
  return h;
}

wds::ErrorAction StageHandler::Handle(const wds::WorkerContext& ctx, std::string_view stage,
                                      const absl::Status& error, absl::Status* raised) const {
  *raised = error;
  if (is_native() || absl::IsCancelled(error)) return ctx.Handle(native_, stage, error);
  if (ctx.errors != nullptr) ctx.errors->Record(stage, error.code());
  ScopedGil gil;
  if (!gil) {
    *raised = PythonIsExiting();
    return wds::ErrorAction::kRaise;
  }
  try {
    py::object exception = ExceptionFromStatus(error, Phase::kData);
    const bool go_on = py::bool_(callable_->get()(exception));
    return go_on ? wds::ErrorAction::kContinue : wds::ErrorAction::kStop;
  } catch (py::error_already_set& e) {
    *raised = StorePythonError(e);
    return wds::ErrorAction::kRaise;
  }
}

wds::WarningSink PythonWarnings() {
  return [](std::string_view message) {
    if (!PythonIsUsable()) return;
    ScopedGil gil;
    if (!gil) return;  // exiting: the warning is dropped
    try {
      py::module_::import("warnings").attr("warn")(py::str(std::string(message)));
    } catch (py::error_already_set& e) {
      // A warnings filter set to "error" raises; a warning must not fail the
      // stream, so it is reported as unraisable instead.
      e.discard_as_unraisable("webdataset_cpp warning");
    }
  };
}

}  // namespace wdspy
