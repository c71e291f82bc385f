// What an opener needs to know about shards opened ahead of their turn
// (WebDatasetOptions::open_ahead; src/io/open_ahead.h opens them).
//
//   if (wds::OpeningAhead() && NeedsTheGil(url)) return wds::OpenInTurn(url);
#pragma once

#include <string_view>

#include "absl/status/status.h"

namespace wds {

// OpeningAhead is true on a thread that opens a shard ahead of its turn.
bool OpeningAhead();

// OpenInTurn is what an opener called ahead returns to decline: the shard is
// then opened in its turn, on its reader's thread (an open that calls
// Python, which would wait there for the GIL its reader may hold).
absl::Status OpenInTurn(std::string_view url);
// IsOpenInTurn says whether `status` is OpenInTurn's.
bool IsOpenInTurn(const absl::Status& status);

// WaitForAheadOpens returns once no thread of this process is opening a
// shard ahead (each ends when its server has answered, or gives up; the
// owners' interrupt checks are not asked). A fork handler calls it, so that
// a child is never forked while such a thread holds a lock (libcurl's,
// OpenSSL's) that the child would wait for forever. Opens started while it
// waits are waited for too.
void WaitForAheadOpens();

}  // namespace wds
