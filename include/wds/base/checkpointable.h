// Checkpointable: the one shape of everything whose position goes into a
// training checkpoint (Loader, wds::torch's DevicePrefetcher), so that a
// training loop saves and restores whichever it holds.
//
//   absl::StatusOr<std::string> state = source.State();  // with the model
//   ...                                                   // restart
//   absl::Status restored = source.Restore(*state);       // continues there
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace wds {

class Checkpointable {
 public:
  virtual ~Checkpointable() = default;

  // State is the position after the last item handed out: a short versioned
  // text of positions, never data, taken without I/O. Items drawn ahead and
  // not yet handed out are not part of it: after Restore they come again.
  // FailedPrecondition, naming why, when the position cannot be recorded.
  [[nodiscard]] virtual absl::StatusOr<std::string> State() const = 0;

  // Restore continues from a State() text: the next items are those that
  // the one who took it would have handed out next, in bytes and order.
  // InvalidArgument for text that is not such a state or of an unknown
  // version; FailedPrecondition for a state of another recipe or layout.
  [[nodiscard]] virtual absl::Status Restore(std::string_view state) = 0;
};

}  // namespace wds
