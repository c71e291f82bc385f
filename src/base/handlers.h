// Applying an error handler: what WorkerContext::Handle does.
#pragma once

#include <string_view>

#include "absl/status/status.h"
#include "wds/base/error.h"

namespace wds {

// WriteWarningToStderr is the warning sink used where none is given.
void WriteWarningToStderr(std::string_view message);

// ApplyHandler records `error` in `counters` (if not null), warns through
// `warn` (stderr when null) when the handler says so, and returns what the
// stage must do; a Cancelled error is always kRaise, uncounted.
// REQUIRES: !error.ok().
ErrorAction ApplyHandler(Handler handler, std::string_view stage, const absl::Status& error,
                         ErrorCounters* counters, const WarningSink& warn);

}  // namespace wds
