// The pipeline's tar source: shard URLs in, WebDataset samples out.
#pragma once

#include <memory>

#include "shards/shard_streams.h"
#include "wds/byte_stream.h"
#include "wds/error.h"
#include "wds/stage.h"
#include "wds/tar_reader.h"

namespace wds {

// TarSamples reads every shard `urls` yields and turns its grouped members
// (wds/internal/tar_grouping.h) into Samples: "__key__", "__url__", then one
// field per member, lower-cased. A repeated field is an InvalidArgument error
// naming the sample and the member. Errors (opening, reading, grouping) go to
// `handler` (stage "tar"); "continue" drops the broken sample (or the rest of
// a broken shard) and goes on with the next.
// `max_member_size` bounds each member (TarReaderOptions::max_member_size).
std::unique_ptr<SampleStream> TarSamples(std::unique_ptr<UrlStream> urls, Opener opener,
                                         Handler handler, const WorkerContext& ctx,
                                         int64_t max_member_size = kDefaultMaxMemberSize);

}  // namespace wds
