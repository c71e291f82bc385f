// WebDataset: the standard pipeline source, which reads WebDataset tar shards
// (the shard list and its split among ranks and workers, tar reading, the
// grouping of members into samples).
//
//   absl::StatusOr<wds::Pipeline> pipe = wds::WebDataset("data/train-{000000..000099}.tar",
//                                                        {.seed = 7, .shardshuffle = true});
//
// Thread safety: WebDataset() may be called from any thread; the Pipeline it
// returns is immutable (see pipeline.h).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "wds/base/error.h"
#include "wds/io/byte_stream.h"
#include "wds/io/remote.h"
#include "wds/pipeline/pipeline.h"
#include "wds/shards/shard_list.h"
#include "wds/tar/tar_reader.h"

namespace wds {

// DatasetIndex lists shard sample counts (wds/tar/shard_index.h).
struct DatasetIndex;

// WebDatasetOptions configure the shard list and tar reading of WebDataset().
struct WebDatasetOptions {
  uint64_t seed = 0;
  // shardshuffle permutes the shard list each epoch by (seed, epoch, pass),
  // identically on every rank, before split_by_node.
  bool shardshuffle = false;
  // resampled draws shards with replacement instead (seeded per rank and
  // worker); endless unless nshards is set. No node/worker split applies.
  bool resampled = false;
  std::optional<int64_t> nshards;
  // shard_weights, with resampled: each shard's relative chance of being
  // drawn (one per shard, finite, >= 0, not all 0), to mix sources in chosen
  // proportions; empty draws uniformly. Without resampled, InvalidArgument.
  std::vector<double> shard_weights;
  // Splitters; null means "do not split at this level".
  ShardSplitter nodesplitter = SplitByNode;
  ShardSplitter workersplitter = SplitByWorker;
  // allow_empty lets a rank or worker with no shards yield nothing instead of
  // failing with an error naming the counts.
  bool allow_empty = false;
  // split chooses whole shards or equal runs of samples per rank and worker
  // (SplitGranularity in shard_list.h). nullopt chooses kSamples when every
  // shard's count is known without reading the shard (dataset_index lists
  // it, or it is a local file with a sidecar .idx) and the splitters are
  // SplitByNode / SplitByWorker / null, else kShards. kSamples with unknown
  // counts scans the shards' headers once per process (a full read for
  // remote and pipe: shards); kSamples with a custom splitter is
  // InvalidArgument (a splitter picks shards, not samples). Not used with
  // `resampled`.
  std::optional<SplitGranularity> split;
  // dataset_index, if set, gives shard sample counts (by URL, as listed).
  std::shared_ptr<const DatasetIndex> dataset_index;
  // handler applies to opening shards, reading tars and grouping members.
  Handler handler = Handler::kReraise;
  // max_member_size is the largest tar member accepted (see tar_reader.h);
  // a larger one is a ResourceExhausted error for `handler`.
  int64_t max_member_size = kDefaultMaxMemberSize;
  // member_name, if set, is asked for each member's name (metadata names
  // aside) before grouping: nullopt skips the member, a name is grouped in
  // its place. Its errors go to `handler` per member, as the reference's
  // tar_file_iterator hands them over: "continue" skips that member, "stop"
  // ends that shard after the sample in progress (the next shard is read).
  MemberNameHook member_name;
  // open_ahead: how many of the next shards each stream opens while it reads
  // one, when they are remote URLs read from their start (RemoteOptions::
  // open_ahead: from WDS_OPEN_AHEAD, default 1), 0 to
  // RemoteOptions::kMaxOpenAhead (InvalidArgument otherwise). The opener is
  // then called from threads of the stream's own: it must be thread-safe.
  int open_ahead = RemoteOptions::FromEnvironment().open_ahead;
  // opener turns a URL into a byte stream; tests substitute in-memory streams.
  // The default reads remote URLs with RemoteOptions::FromEnvironment() (read
  // when these options are made) and one connection pool for the pipeline.
  Opener opener = MakeOpener();
};

// WebDataset builds the standard source: expand `urls` (brace patterns and
// "::" lists), order/split the shard list per epoch, open each shard and group
// its tar members into samples. A malformed pattern or an empty list is an
// InvalidArgument setup error.
[[nodiscard]] absl::StatusOr<Pipeline> WebDataset(std::string_view urls,
                                                  WebDatasetOptions options = {});
[[nodiscard]] absl::StatusOr<Pipeline> WebDataset(std::vector<std::string> urls,
                                                  WebDatasetOptions options = {});

}  // namespace wds
