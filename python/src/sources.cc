#include "sources.h"

#include <functional>
#include <utility>

#include "errors.h"
#include "opener.h"
#include "py_ref.h"
#include "wds/base/interrupt.h"
#include "wds/internal/base/strings.h"
#include "wds/pipeline/web_dataset.h"
#include "wds/shards/shard_list.h"
#include "wds/stages/stages.h"
#include "wds/tar/shard_counts.h"

namespace wdspy {
namespace {

using UrlResult = absl::StatusOr<std::optional<std::string>>;
// NextUrl yields the next shard URL, nullopt at the end, or the list's error.
using NextUrl = std::function<UrlResult()>;

bool IsStopHandler(wds::Handler h) {
  return h == wds::Handler::kWarnAndStop || h == wds::Handler::kIgnoreAndStop;
}

// OneShard opens the core's reader over one URL, unsplit.
std::unique_ptr<wds::SampleStream> OneShard(const std::string& url, wds::Handler handler,
                                            const wds::Opener& opener,
                                            const wds::MemberNameHook& member_name,
                                            const wds::WorkerContext& ctx) {
  wds::WebDatasetOptions options;
  options.nodesplitter = nullptr;
  options.workersplitter = nullptr;
  options.allow_empty = true;
  options.handler = handler;
  options.opener = opener;
  options.member_name = member_name;
  absl::StatusOr<wds::Pipeline> one = wds::WebDataset(std::vector<std::string>{url}, options);
  if (!one.ok()) return wds::ErrorStream(one.status());
  return one->Open(ctx);
}

// ShardByShard reads the shards `next_url` names one after the other. A
// native handler acts inside each shard's reader (a "stop" one ends every
// shard); a Python handler is asked once per failing shard.
class ShardByShard : public wds::SampleStream {
 public:
  ShardByShard(NextUrl next_url, StageHandler handler, wds::Opener opener,
               wds::MemberNameHook member_name, const wds::WorkerContext& ctx)
      : next_url_(std::move(next_url)),
        handler_(std::move(handler)),
        opener_(std::move(opener)),
        ctx_(ctx) {
    if (member_name) {
      member_name_ = handler_.is_native() ? CountingErrors(std::move(member_name))
                                          : HandledPerMember(std::move(member_name));
    }
    shard_ctx_ = ctx;
    // A Python handler counts the errors itself (StageHandler::Handle).
    if (!handler_.is_native()) shard_ctx_.errors = nullptr;
  }

  wds::SampleResult Next() override {
    if (!error_.ok()) return error_;
    if (ended_) return std::nullopt;
    while (true) {
      if (shard_ == nullptr && !OpenNext()) return Finish();
      wds::SampleResult item = shard_->Next();
      if (item.ok() && item->has_value()) return item;
      shard_.reset();
      if (item.ok()) {
        if (StoppedByHandler()) return Finish();
        continue;
      }
      if (hook_raised_) {
        error_ = item.status();  // the handler saw it already (HandledPerMember)
        return error_;
      }
      absl::Status raised;
      const wds::ErrorAction action = handler_.is_native()
                                          ? wds::ErrorAction::kRaise
                                          : handler_.Handle(ctx_, "tar", item.status(), &raised);
      if (action == wds::ErrorAction::kRaise) {
        error_ = handler_.is_native() ? item.status() : raised;
        return error_;
      }
      if (action == wds::ErrorAction::kStop) return Finish();
    }
  }

 private:
  // OpenNext opens the next shard; false at the end of the list or on its
  // error (error_ set).
  bool OpenNext() {
    UrlResult url = next_url_();
    if (!url.ok()) {
      error_ = url.status();
      return false;
    }
    if (!url->has_value()) return false;
    skip_rest_of_shard_ = false;
    hook_errors_ = 0;
    errors_before_ = ctx_.errors ? ctx_.errors->Total() : 0;
    shard_ = OneShard(**url, handler_.is_native() ? handler_.native() : wds::Handler::kReraise,
                      opener_, member_name_, shard_ctx_);
    return true;
  }

  // HandledPerMember hands the errors of the member callables (`hook`) to
  // the Python handler member by member, as the reference does: True skips
  // the member; False ends the shard after the sample in progress (the rest
  // of the shard is read but skipped), then the next shard is read; its
  // exception is raised as it is, without asking the handler again.
  wds::MemberNameHook HandledPerMember(wds::MemberNameHook hook) {
    return [this, hook = std::move(hook)](
               std::string_view name) -> absl::StatusOr<std::optional<std::string>> {
      if (skip_rest_of_shard_) return std::nullopt;
      absl::StatusOr<std::optional<std::string>> named = hook(name);
      if (named.ok()) return named;
      absl::Status raised;
      switch (handler_.Handle(ctx_, "tar", named.status(), &raised)) {
        case wds::ErrorAction::kContinue:
          return std::nullopt;
        case wds::ErrorAction::kStop:
          skip_rest_of_shard_ = true;
          return std::nullopt;
        case wds::ErrorAction::kRaise:
          hook_raised_ = true;
          return raised;
      }
      return std::nullopt;
    };
  }

  // CountingErrors counts the member callables' errors, which the core hands
  // to a native handler one member at a time (a stopping one ends only that
  // shard, as in the reference): StoppedByHandler leaves them out.
  wds::MemberNameHook CountingErrors(wds::MemberNameHook hook) {
    return [this, hook = std::move(hook)](std::string_view name) {
      absl::StatusOr<std::optional<std::string>> named = hook(name);
      if (!named.ok()) ++hook_errors_;
      return named;
    };
  }

  // StoppedByHandler: a native "stop" handler ended the shard on an error.
  bool StoppedByHandler() const {
    return handler_.is_native() && IsStopHandler(handler_.native()) && ctx_.errors &&
           ctx_.errors->Total() > errors_before_ + hook_errors_;
  }

  wds::SampleResult Finish() {
    if (!error_.ok()) return error_;
    ended_ = true;
    return std::nullopt;
  }

  NextUrl next_url_;
  StageHandler handler_;
  wds::Opener opener_;
  wds::MemberNameHook member_name_;
  wds::WorkerContext ctx_;
  wds::WorkerContext shard_ctx_;
  std::unique_ptr<wds::SampleStream> shard_;
  int64_t errors_before_ = 0;
  // Set by HandledPerMember: the handler chose to stop reading this shard,
  // or raised.
  bool skip_rest_of_shard_ = false;
  bool hook_raised_ = false;
  // hook_errors_ counts CountingErrors' errors in the current shard.
  int64_t hook_errors_ = 0;
  absl::Status error_;
  bool ended_ = false;
};

// PythonUrls takes URLs from a Python iterator under the GIL.
NextUrl PythonUrls(std::shared_ptr<PyRef> iterator) {
  return [iterator]() -> UrlResult {
    ScopedGil gil;
    if (!gil) return PythonIsExiting();
    try {
      py::object item = py::reinterpret_steal<py::object>(PyIter_Next(iterator->get().ptr()));
      if (!item) {
        if (PyErr_Occurred()) throw py::error_already_set();
        return std::nullopt;
      }
      if (py::isinstance<py::dict>(item)) item = item["url"];
      if (!py::isinstance<py::str>(item)) {
        throw py::type_error("a shard list yields str URLs or dicts with a \"url\", got " +
                             py::repr(item).cast<std::string>());
      }
      return item.cast<std::string>();
    } catch (py::error_already_set& e) {
      return StorePythonError(e);
    }
  };
}

class PythonSamples : public wds::SampleStream {
 public:
  PythonSamples(std::shared_ptr<PyRef> iterator, std::shared_ptr<NameSet> tensor_names)
      : iterator_(std::move(iterator)), tensor_names_(std::move(tensor_names)) {}

  wds::SampleResult Next() override {
    if (!error_.ok()) return error_;
    if (ended_) return std::nullopt;
    ScopedGil gil;
    if (!gil) return PythonIsExiting();
    try {
      py::object item = py::reinterpret_steal<py::object>(PyIter_Next(iterator_->get().ptr()));
      if (!item) {
        if (PyErr_Occurred()) throw py::error_already_set();
        ended_ = true;
        return std::nullopt;
      }
      absl::StatusOr<wds::Sample> sample = SampleFromPython(item, tensor_names_.get());
      if (!sample.ok()) throw py::type_error(std::string(wds::ToStd(sample.status().message())));
      return *std::move(sample);
    } catch (py::error_already_set& e) {
      error_ = StorePythonError(e);
      return error_;
    }
  }

 private:
  std::shared_ptr<PyRef> iterator_;
  std::shared_ptr<NameSet> tensor_names_;
  absl::Status error_;
  bool ended_ = false;
};

class Counting : public wds::SampleStream {
 public:
  Counting(std::unique_ptr<wds::SampleStream> upstream, std::shared_ptr<std::atomic<int64_t>> count)
      : upstream_(std::move(upstream)), count_(std::move(count)) {}
  wds::SampleResult Next() override {
    wds::SampleResult item = upstream_->Next();
    if (item.ok() && item->has_value()) count_->fetch_add(1, std::memory_order_relaxed);
    return item;
  }

 private:
  std::unique_ptr<wds::SampleStream> upstream_;
  std::shared_ptr<std::atomic<int64_t>> count_;
};

wds::ShardListOptions ListOptions(const ShardSourceOptions& o) {
  wds::ShardListOptions list;
  list.shuffle = o.shuffle;
  list.nodesplitter = o.split_nodes ? wds::ShardSplitter(wds::SplitByNode) : nullptr;
  list.workersplitter = o.split_workers ? wds::ShardSplitter(wds::SplitByWorker) : nullptr;
  list.allow_empty = o.allow_empty;
  return list;
}

}  // namespace

wds::StreamFactory ShardSource(std::vector<std::string> urls, const ShardSourceOptions& options,
                               StageHandler handler, std::shared_ptr<const RemoteAccess> remote,
                               std::string* recipe) {
  if (urls.empty()) throw py::value_error("the shard list is empty");
  if (!options.shard_weights.empty()) {
    if (!options.resampled) throw py::value_error("shard weights weigh resampled draws only");
    ThrowIfError(wds::CheckShardWeights(options.shard_weights, urls.size()));
  }
  wds::Opener opener = PythonOpener(remote);
  if (!handler.is_native()) {
    if (options.split_samples) {
      throw py::value_error(
          "split='samples' needs a native handler (reraise_exception, warn_and_continue, "
          "ignore_and_continue, ...), not a Python callable");
    }
    if (options.resampled) {
      // The draws of the native source (the same seeds), read shard by shard
      // with the Python handler; no split applies.
      auto shared = std::make_shared<const std::vector<std::string>>(std::move(urls));
      const std::optional<int64_t> nshards = options.nshards;
      const std::vector<double> weights = options.shard_weights;
      const uint64_t seed = options.seed;
      return [shared, nshards, weights, seed, handler,
              opener](const wds::WorkerContext& ctx) -> std::unique_ptr<wds::SampleStream> {
        wds::WorkerContext seeded = ctx;
        seeded.seed = seed;  // as the native source's Pipeline seeds its streams
        auto draws = std::make_shared<wds::ShardDraws>(*shared, seeded, weights);
        auto left = std::make_shared<std::optional<int64_t>>(nshards);
        NextUrl next_url = [draws, left]() -> UrlResult {
          if (left->has_value()) {
            if (**left <= 0) return std::nullopt;
            --**left;
          }
          return draws->Next();
        };
        return std::make_unique<ShardByShard>(std::move(next_url), handler, opener, nullptr, ctx);
      };
    }
    auto shared = std::make_shared<const std::vector<std::string>>(std::move(urls));
    const wds::ShardListOptions list = ListOptions(options);
    return [shared, list, handler,
            opener](const wds::WorkerContext& ctx) -> std::unique_ptr<wds::SampleStream> {
      absl::StatusOr<std::vector<std::string>> mine = wds::ShardsForWorker(*shared, list, ctx);
      if (!mine.ok()) return wds::ErrorStream(mine.status());
      auto pending = std::make_shared<std::vector<std::string>>(*std::move(mine));
      auto next = std::make_shared<size_t>(0);
      NextUrl next_url = [pending, next]() -> UrlResult {
        if (*next == pending->size()) return std::nullopt;
        return (*pending)[(*next)++];
      };
      return std::make_unique<ShardByShard>(std::move(next_url), handler, opener, nullptr, ctx);
    };
  }
  wds::WebDatasetOptions web;
  web.seed = options.seed;
  web.shardshuffle = options.shuffle;
  web.resampled = options.resampled;
  web.nshards = options.nshards;
  web.shard_weights = options.shard_weights;
  const wds::ShardListOptions list = ListOptions(options);
  web.nodesplitter = list.nodesplitter;
  web.workersplitter = list.workersplitter;
  web.allow_empty = options.allow_empty;
  web.split =
      options.split_samples ? wds::SplitGranularity::kSamples : wds::SplitGranularity::kShards;
  web.handler = handler.native();
  web.open_ahead = remote->options().open_ahead;
  web.opener = std::move(opener);
  // The pipeline's catalog starts with every count this process knows (the
  // dataset index's among them): a restore of shards drawn with replacement
  // counts the drawn shards from it before reading any. A sample-granular
  // split needs every count, read here once per process. A count that cannot
  // be read is left to the catalog, which reports it when the stream starts,
  // as without the cache; Ctrl-C during the reads (a stalled pipe: or
  // server) raises here.
  std::shared_ptr<wds::ListCounts> counts =
      CountsFor(urls, options.dataset_index, options.index_remote);
  if (options.split_samples && !options.resampled) {
    CheckIndexUnchanged(*counts, urls, options.dataset_index, options.index_digest);
    SignalCheck signals;
    {
      ScopedGilRelease release;
      wds::ScopedInterruptCheck check(signals.check());
      (void)counts->Counts(urls, web.opener);
    }
    signals.RethrowIfRaised();
  }
  web.dataset_index = counts->Known();
  absl::StatusOr<wds::Pipeline> pipeline = wds::WebDataset(std::move(urls), std::move(web));
  ThrowIfError(pipeline.status());
  if (recipe != nullptr) *recipe = pipeline->recipe();
  return [pipeline = *std::move(pipeline)](const wds::WorkerContext& ctx) {
    return pipeline.Open(ctx);
  };
}

wds::StreamFactory UrlSource(py::handle iterator, StageHandler handler,
                             std::shared_ptr<const RemoteAccess> remote,
                             wds::MemberNameHook member_name) {
  NextUrl next_url = PythonUrls(std::make_shared<PyRef>(iterator));
  wds::Opener opener = PythonOpener(std::move(remote));
  return [next_url, handler, opener, member_name](const wds::WorkerContext& ctx) {
    return std::make_unique<ShardByShard>(next_url, handler, opener, member_name, ctx);
  };
}

wds::ShardCounts& ProcessCounts() {
  static auto* counts = new wds::ShardCounts;
  return *counts;
}

std::shared_ptr<wds::ListCounts> CountsFor(
    const std::vector<std::string>& urls, const std::string& index_url,
    const std::shared_ptr<const RemoteAccess>& index_remote) {
  const wds::Opener opener = PythonOpener(
      (index_remote ? index_remote : RemoteAccess::FromPython(py::none()))->Uncached());
  absl::StatusOr<std::shared_ptr<wds::ListCounts>> list;
  SignalCheck signals;  // a remote index may stall
  {
    ScopedGilRelease release;  // the index is read at first use
    wds::ScopedInterruptCheck check(signals.check());
    list = ProcessCounts().For(urls, index_url, opener);
  }
  signals.RethrowIfRaised();
  if (!list.ok()) {
    const absl::Status& error = list.status();
    absl::Status named(error.code(), wds::Cat("dataset_index ", wds::ToStd(error.message())));
    // A remote index's error keeps what marks it as remote (its exception type).
    error.ForEachPayload([&named](absl::string_view type, const absl::Cord& payload) {
      named.SetPayload(type, payload);
    });
    RaiseStatus(named, Phase::kSetup);
  }
  return *std::move(list);
}

void CheckIndexUnchanged(const wds::ListCounts& counts, const std::vector<std::string>& urls,
                         const std::string& index_url, uint64_t expected) {
  if (expected == 0 || counts.IndexDigest(urls) == expected) return;
  throw py::value_error(wds::Cat(
      "dataset_index ", index_url,
      " changed since the dataset was made: this process read other counts of its shards than "
      "the process that made it, and would share out the samples otherwise than the rest of the "
      "job (replace an index only between jobs)"));
}

wds::MemberNameHook PythonMemberNames(py::handle select_files, py::handle rename_files) {
  if (select_files.is_none() && rename_files.is_none()) return nullptr;
  auto select = std::make_shared<PyRef>(select_files);
  auto rename = std::make_shared<PyRef>(rename_files);
  return [select, rename](std::string_view name) -> absl::StatusOr<std::optional<std::string>> {
    ScopedGil gil;
    if (!gil) return PythonIsExiting();
    // An earlier member's exception that a native handler skipped is dropped
    // here, before it could stand for a later error.
    ClearPythonError();
    try {
      py::object fname = ToPyStr(name);  // as the reference's tarfile decodes names
      if (!rename->get().is_none()) fname = rename->get()(fname);
      if (!select->get().is_none() && !py::bool_(select->get()(fname))) return std::nullopt;
      if (!py::isinstance<py::str>(fname)) {
        throw py::type_error("rename_files must return a str, got " +
                             py::repr(fname).cast<std::string>() + " for member " +
                             std::string(name));
      }
      PyObject* encoded = PyUnicode_AsEncodedString(fname.ptr(), "utf-8", "surrogateescape");
      if (encoded == nullptr) throw py::error_already_set();
      return std::string(py::reinterpret_steal<py::bytes>(encoded));
    } catch (py::error_already_set& e) {
      return StorePythonError(e);
    }
  };
}

wds::StreamFactory SampleSource(py::handle iterator, std::shared_ptr<NameSet> tensor_names) {
  auto ref = std::make_shared<PyRef>(iterator);
  return [ref, tensor_names](const wds::WorkerContext&) {
    return std::make_unique<PythonSamples>(ref, tensor_names);
  };
}

wds::StageFactory CountingStage(std::shared_ptr<std::atomic<int64_t>> count) {
  return [count](const wds::StreamFactory& upstream, const wds::WorkerContext& ctx) {
    return std::make_unique<Counting>(upstream(ctx), count);
  };
}

wds::StageFactory SeededShuffle(size_t bufsize, size_t initial, std::optional<uint64_t> seed) {
  wds::StageFactory shuffle = wds::ShuffleStage(bufsize, initial);
  if (!seed.has_value()) return shuffle;
  return [shuffle, seed](const wds::StreamFactory& upstream, const wds::WorkerContext& ctx) {
    wds::WorkerContext mine = ctx;
    mine.seed = *seed;
    const uint64_t recipe_seed = ctx.seed;
    wds::StreamFactory restored = [upstream, recipe_seed](const wds::WorkerContext& c) {
      wds::WorkerContext u = c;
      u.seed = recipe_seed;
      return upstream(u);
    };
    return shuffle(restored, mine);
  };
}

}  // namespace wdspy
