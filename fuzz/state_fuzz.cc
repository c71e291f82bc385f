// Loader states and job states (Loader::State, Loader::JobState): text read
// back from checkpoints on disk, which a resume parses before anything else.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "loader/loader_state.h"
#include "wds/loader/elastic.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto state = wds::ParseState(text);
  if (state.ok()) (void)wds::StateJson(*state);
  auto job = wds::ParseJobState(text);
  if (job.ok()) {
    // What a job state renders must read back as the same job state.
    auto again = wds::ParseJobState(wds::JobStateJson(*job));
    if (!again.ok() || again->digest != job->digest) __builtin_trap();
  }
  (void)wds::DescribeJobState(text);
  return 0;
}
