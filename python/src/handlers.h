// Error handlers given from Python: one of the reference package's handler
// functions (run natively, no GIL) or any Python callable, which sees the
// error as a Python exception and returns True (skip the item, go on), False
// (end the stage's stream cleanly) or raises (the error ends the stream).
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <string_view>

#include "absl/status/status.h"
#include "py_ref.h"
#include "wds/base/error.h"
#include "wds/base/stage.h"

namespace wdspy {

namespace py = pybind11;

class StageHandler {
 public:
  // From a handler name ("reraise", "warn_and_continue", ...) or a callable.
  // REQUIRES: the GIL is held.
  static StageHandler FromPython(py::handle handler);

  bool is_native() const { return callable_ == nullptr; }
  wds::Handler native() const { return native_; }

  // Handle decides what the stage `stage` does with `error`, counting it in
  // ctx.errors. On kRaise, `*raised` is the error to return (the callable's
  // own exception when it raised one). Takes the GIL for a callable.
  wds::ErrorAction Handle(const wds::WorkerContext& ctx, std::string_view stage,
                          const absl::Status& error, absl::Status* raised) const;

 private:
  wds::Handler native_ = wds::Handler::kReraise;
  std::shared_ptr<PyRef> callable_;
};

// PythonWarnings is the warning sink that hands native handler warnings to
// Python's warnings module (UserWarning). Takes the GIL.
wds::WarningSink PythonWarnings();

}  // namespace wdspy
