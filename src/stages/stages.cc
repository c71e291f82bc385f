// The per-sample stages: map, select, rename, to_tuple, slice and repeat
// (shuffle lives in shuffle.cc).
#include "wds/stages/stages.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "stages/passes.h"
#include "stages/transform_stream.h"
#include "wds/internal/base/strings.h"

namespace wds {
namespace {

constexpr size_t kAbsent = static_cast<size_t>(-1);

// FieldSpec is one ';'-separated list of alternative field names ("jpg;png").
struct FieldSpec {
  std::string text;
  std::vector<std::string> alternatives;
};

absl::StatusOr<FieldSpec> ParseFieldSpec(std::string_view stage, std::string_view text) {
  FieldSpec spec{std::string(text), {}};
  size_t start = 0;
  while (true) {
    const size_t end = std::min(text.find(';', start), text.size());
    std::string_view name = text.substr(start, end - start);
    if (name.empty()) {
      return absl::InvalidArgumentError(
          Cat(stage, ": field spec \"", text, "\" has an empty field name"));
    }
    spec.alternatives.emplace_back(name);
    if (end == text.size()) return spec;
    start = end + 1;
  }
}

size_t IndexOf(const Sample& sample, std::string_view name) {
  for (size_t i = 0; i < sample.size(); ++i) {
    if (sample[i].first == name) return i;
  }
  return kAbsent;
}

// FirstPresent returns the index of the first alternative the sample has.
size_t FirstPresent(const Sample& sample, const FieldSpec& spec) {
  for (const std::string& name : spec.alternatives) {
    const size_t i = IndexOf(sample, name);
    if (i != kAbsent) return i;
  }
  return kAbsent;
}

// MakeStage makes a StageFactory whose stream is `make(upstream stream, ctx)`.
template <typename Make>
StageFactory MakeStage(Make make) {
  return [make = std::move(make)](const StreamFactory& upstream, const WorkerContext& ctx) {
    return make(upstream(ctx), ctx);
  };
}

class MapStream final : public TransformStream {
 public:
  using Fn = std::function<absl::StatusOr<Sample>(Sample)>;
  MapStream(std::unique_ptr<SampleStream> upstream, const WorkerContext& ctx, Handler handler,
            std::shared_ptr<const Fn> fn)
      : TransformStream(std::move(upstream), ctx, "map", handler), fn_(std::move(fn)) {}

 private:
  // Like the reference, a dict result gets the input's __key__ back, so that
  // functions building fresh samples keep the key.
  absl::StatusOr<bool> Apply(Sample& sample) override {
    url_.assign(sample.url());
    key_.assign(sample.key());
    const bool had_key = sample.GetString(kKeyField) != nullptr;
    absl::StatusOr<Sample> result = (*fn_)(std::move(sample));
    if (!result.ok()) {
      return SampleError(result.status().code(), url_, key_,
                         Cat("map function failed: ", ToStd(result.status().message())));
    }
    sample = *std::move(result);
    if (had_key && !sample.is_tuple() && sample.key() != key_) {
      sample.Set(std::string(kKeyField), key_);
    }
    return true;
  }

  std::shared_ptr<const Fn> fn_;
  std::string url_;
  std::string key_;
};

class SelectStream final : public SampleStream {
 public:
  using Predicate = std::function<bool(const Sample&)>;
  SelectStream(std::unique_ptr<SampleStream> upstream, std::shared_ptr<const Predicate> predicate)
      : upstream_(std::move(upstream)), predicate_(std::move(predicate)) {}

  SampleResult Next() override {
    while (true) {
      SampleResult item = upstream_->Next();
      if (!item.ok() || !item->has_value() || (*predicate_)(**item)) return item;
    }
  }

 private:
  std::unique_ptr<SampleStream> upstream_;
  std::shared_ptr<const Predicate> predicate_;
};

struct RenameSpec {
  std::string name;
  FieldSpec source;
};

struct RenamePlan {
  std::vector<RenameSpec> renames;
  // replaced lists every alternative, metadata ones too: the reference
  // removes all of them, not only the one that was found.
  std::vector<std::string> replaced;
  bool keep = true;
};

absl::StatusOr<RenamePlan> MakeRenamePlan(std::vector<std::pair<std::string, std::string>> pairs,
                                          bool keep) {
  RenamePlan plan;
  plan.keep = keep;
  for (auto& [name, text] : pairs) {
    if (name.empty() || IsMetadataField(name)) {
      return absl::InvalidArgumentError(
          Cat("rename: cannot rename to \"", name, "\" (empty or a metadata name)"));
    }
    for (const RenameSpec& r : plan.renames) {
      if (r.name == name) {
        return absl::InvalidArgumentError(Cat("rename: \"", name, "\" is renamed twice"));
      }
    }
    absl::StatusOr<FieldSpec> source = ParseFieldSpec("rename", text);
    if (!source.ok()) return source.status();
    for (const std::string& alt : source->alternatives) plan.replaced.push_back(alt);
    plan.renames.push_back({std::move(name), *std::move(source)});
  }
  return plan;
}

class RenameStream final : public TransformStream {
 public:
  RenameStream(std::unique_ptr<SampleStream> upstream, const WorkerContext& ctx, Handler handler,
               std::shared_ptr<const RenamePlan> plan)
      : TransformStream(std::move(upstream), ctx, "rename", handler), plan_(std::move(plan)) {}

 private:
  absl::StatusOr<bool> Apply(Sample& sample) override {
    picked_.clear();
    for (const RenameSpec& r : plan_->renames) {
      const size_t i = FirstPresent(sample, r.source);
      if (i == kAbsent) {
        return SampleError(absl::StatusCode::kNotFound, sample.url(), sample.key(),
                           Cat("rename: no field \"", r.source.text, "\" to rename to \"", r.name,
                               "\" (fields present: ", FieldNames(sample), ")"));
      }
      picked_.push_back(sample[i].second);
    }
    Sample out;
    for (Sample::Field& field : sample) {
      if (Kept(field.first)) out.Append(std::move(field.first), std::move(field.second));
    }
    for (size_t i = 0; i < picked_.size(); ++i) {
      out.Set(plan_->renames[i].name, std::move(picked_[i]));
    }
    sample = std::move(out);
    return true;
  }

  bool Kept(std::string_view name) const {
    if (!plan_->keep) return false;
    for (const std::string& r : plan_->replaced) {
      if (r == name) return false;
    }
    return true;
  }

  std::shared_ptr<const RenamePlan> plan_;
  std::vector<Value> picked_;
};

absl::StatusOr<std::vector<FieldSpec>> MakeTupleSpecs(const std::vector<std::string>& fields) {
  std::vector<FieldSpec> specs;
  for (const std::string& text : fields) {
    for (const FieldSpec& s : specs) {
      if (s.text == text) {
        return absl::InvalidArgumentError(Cat("to_tuple: field \"", text, "\" is listed twice"));
      }
    }
    absl::StatusOr<FieldSpec> spec = ParseFieldSpec("to_tuple", text);
    if (!spec.ok()) return spec.status();
    specs.push_back(*std::move(spec));
  }
  return specs;
}

class ToTupleStream final : public TransformStream {
 public:
  ToTupleStream(std::unique_ptr<SampleStream> upstream, const WorkerContext& ctx, Handler handler,
                std::shared_ptr<const std::vector<FieldSpec>> specs, MissingField missing)
      : TransformStream(std::move(upstream), ctx, "to_tuple", handler),
        specs_(std::move(specs)),
        missing_(missing) {}

 private:
  absl::StatusOr<bool> Apply(Sample& sample) override {
    indices_.clear();
    for (const FieldSpec& spec : *specs_) {
      const size_t i = FirstPresent(sample, spec);
      if (i == kAbsent && missing_ == MissingField::kSkip) return false;
      if (i == kAbsent && missing_ == MissingField::kError) {
        return SampleError(absl::StatusCode::kNotFound, sample.url(), sample.key(),
                           Cat("to_tuple: no field \"", spec.text,
                               "\" (fields present: ", FieldNames(sample), ")"));
      }
      indices_.push_back(i);
    }
    Sample tuple;
    tuple.set_is_tuple(true);
    for (size_t k = 0; k < indices_.size(); ++k) {
      tuple.Append((*specs_)[k].text, TakeValue(sample, k));
    }
    sample = std::move(tuple);
    return true;
  }

  // TakeValue moves the value for spec k out of `sample` unless a later spec
  // picked the same field (alternatives can overlap), which needs a copy.
  Value TakeValue(Sample& sample, size_t k) const {
    const size_t i = indices_[k];
    if (i == kAbsent) return Buffer();
    for (size_t later = k + 1; later < indices_.size(); ++later) {
      if (indices_[later] == i) return sample[i].second;
    }
    return std::move(sample[i].second);
  }

  std::shared_ptr<const std::vector<FieldSpec>> specs_;
  MissingField missing_;
  std::vector<size_t> indices_;
};

// SliceStream mirrors CPython's itertools.islice, including how far it reads:
// it never pulls an item at or past `stop`.
class SliceStream final : public SampleStream {
 public:
  SliceStream(std::unique_ptr<SampleStream> upstream, int64_t start, std::optional<int64_t> stop,
              int64_t step)
      : upstream_(std::move(upstream)), next_(start), stop_(stop), step_(step) {
    if (stop_.has_value()) next_ = std::min(next_, *stop_);
  }

  SampleResult Next() override {
    while (read_ < next_) {
      SampleResult skipped = upstream_->Next();
      if (!skipped.ok() || !skipped->has_value()) return skipped;
      ++read_;
    }
    if (stop_.has_value() && read_ >= *stop_) return std::nullopt;
    SampleResult item = upstream_->Next();
    if (!item.ok() || !item->has_value()) return item;
    ++read_;
    next_ += step_;
    if (stop_.has_value()) next_ = std::min(next_, *stop_);
    return item;
  }

 private:
  std::unique_ptr<SampleStream> upstream_;
  int64_t read_ = 0;
  int64_t next_;
  std::optional<int64_t> stop_;
  int64_t step_;
};

absl::Status CheckSlice(int64_t start, std::optional<int64_t> stop, int64_t step) {
  if (start < 0) return absl::InvalidArgumentError(Cat("slice: start ", start, " is negative"));
  if (step < 1) return absl::InvalidArgumentError(Cat("slice: step ", step, " is below 1"));
  if (stop.has_value() && *stop < start) {
    return absl::InvalidArgumentError(Cat("slice: stop ", *stop, " is below start ", start));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<MissingField> ParseMissingField(std::string_view name) {
  if (name == "error") return MissingField::kError;
  if (name == "skip") return MissingField::kSkip;
  if (name == "empty") return MissingField::kEmpty;
  return absl::InvalidArgumentError(
      Cat("unknown missing-field policy \"", name, "\" (expected error, skip or empty)"));
}

StageFactory MapStage(std::function<absl::StatusOr<Sample>(Sample)> fn, Handler handler) {
  if (!fn) return FailingStage(absl::InvalidArgumentError("map: the function is empty"));
  auto shared = std::make_shared<const MapStream::Fn>(std::move(fn));
  return MakeStage([shared, handler](std::unique_ptr<SampleStream> up, const WorkerContext& ctx) {
    return std::make_unique<MapStream>(std::move(up), ctx, handler, shared);
  });
}

StageFactory SelectStage(std::function<bool(const Sample&)> predicate) {
  if (!predicate) return FailingStage(absl::InvalidArgumentError("select: the predicate is empty"));
  auto shared = std::make_shared<const SelectStream::Predicate>(std::move(predicate));
  return MakeStage([shared](std::unique_ptr<SampleStream> up, const WorkerContext&) {
    return std::make_unique<SelectStream>(std::move(up), shared);
  });
}

StageFactory RenameStage(std::vector<std::pair<std::string, std::string>> renames, bool keep,
                         Handler handler) {
  absl::StatusOr<RenamePlan> plan = MakeRenamePlan(std::move(renames), keep);
  if (!plan.ok()) return FailingStage(plan.status());
  auto shared = std::make_shared<const RenamePlan>(*std::move(plan));
  return MakeStage([shared, handler](std::unique_ptr<SampleStream> up, const WorkerContext& ctx) {
    return std::make_unique<RenameStream>(std::move(up), ctx, handler, shared);
  });
}

StageFactory ToTupleStage(std::vector<std::string> fields, MissingField missing, Handler handler) {
  absl::StatusOr<std::vector<FieldSpec>> specs = MakeTupleSpecs(fields);
  if (!specs.ok()) return FailingStage(specs.status());
  auto shared = std::make_shared<const std::vector<FieldSpec>>(*std::move(specs));
  return MakeStage(
      [shared, missing, handler](std::unique_ptr<SampleStream> up, const WorkerContext& ctx) {
        return std::make_unique<ToTupleStream>(std::move(up), ctx, handler, shared, missing);
      });
}

StageFactory SliceStage(int64_t start, std::optional<int64_t> stop, int64_t step) {
  if (absl::Status s = CheckSlice(start, stop, step); !s.ok()) return FailingStage(std::move(s));
  return MakeStage([start, stop, step](std::unique_ptr<SampleStream> up, const WorkerContext&) {
    return std::make_unique<SliceStream>(std::move(up), start, stop, step);
  });
}

StageFactory RepeatStage(std::optional<int64_t> count) {
  if (count.has_value() && *count < 0) {
    return FailingStage(absl::InvalidArgumentError(Cat("repeat: count ", *count, " is negative")));
  }
  return [count](const StreamFactory& upstream, const WorkerContext& ctx) {
    return PassesStream(upstream, ctx, count, /*empty_pass_is_error=*/false);
  };
}

}  // namespace wds
