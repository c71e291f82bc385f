// The pipeline's tar source: shard URLs in, WebDataset samples out.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "shards/shard_streams.h"
#include "tar/shard_catalog.h"
#include "wds/base/error.h"
#include "wds/base/sample.h"
#include "wds/base/stage.h"
#include "wds/io/byte_stream.h"
#include "wds/tar/tar_reader.h"

namespace wds {

// TarSamples reads every shard `urls` yields and turns its grouped members
// (wds/internal/tar/tar_grouping.h) into Samples: "__key__", "__url__", then one
// field per member, lower-cased. A repeated field is an InvalidArgument error
// naming the sample and the member. Errors (opening, reading, grouping) go to
// `handler` (stage "tar"); "continue" drops the broken sample (or the rest of
// a broken shard) and goes on with the next.
// `max_member_size` bounds each member (TarReaderOptions::max_member_size).
//
// A slice [begin, end) of a shard (sample-granular splits) starts reading at
// sample `begin`'s offset from `catalog` and stops after end - begin samples;
// a slice that reaches the shard's end reads on to it, so the end of the
// archive is checked. A shard that ends before its slice, or holds more
// samples than its count, is a DataLoss error naming it and the counts (a
// stale index). REQUIRES: catalog != nullptr when a slice has begin > 0.
//
// `drawn` says that `urls` draws shards with replacement (perhaps forever):
// a restore then plans the pass only up to the checkpoint's position and
// goes on with `urls` after it; unless `urls` ended there, the pass's size
// is then unknown (kEndlessPass), which an elastic resume refuses.
//
// `open_ahead` (WebDatasetOptions::open_ahead) is how many of `urls`' next
// slices are taken while a shard is read; those that are remote URLs read
// from their first sample are opened then, each on a thread of its own
// (AheadOpen, io/open_ahead.h), so `opener` must be callable from any thread.
// What is read, in what order, and where errors are reported (an open's
// error when its shard's turn comes, to `handler`) do not depend on it.
//
// `member_name`, if set, renames or skips members before grouping
// (ShardSampleReaderOptions::member_name). Its errors go to `handler` one
// member at a time, as the reference's tar_file_iterator hands them over:
// "continue" skips that member only; "stop" ends that shard after the sample
// in progress and goes on with the next shard; "raise" returns the error as
// it is, without that sample.
// AppendMemberField appends a member's `data` to `sample` under its field as
// every tar reader names it, lower-cased (in `scratch`, reused); a field the
// sample holds already is InvalidArgument naming `url`, the sample, and the
// member at `offset`.
[[nodiscard]] absl::Status AppendMemberField(Sample& sample, std::string_view field, Buffer data,
                                             std::string_view url, std::string_view member,
                                             int64_t offset, std::string& scratch);

std::unique_ptr<SampleStream> TarSamples(std::unique_ptr<UrlStream> urls, Opener opener,
                                         Handler handler, const WorkerContext& ctx,
                                         int64_t max_member_size = kDefaultMaxMemberSize,
                                         std::shared_ptr<ShardCatalog> catalog = nullptr,
                                         MemberNameHook member_name = nullptr, bool drawn = false,
                                         int open_ahead = 0);

}  // namespace wds
