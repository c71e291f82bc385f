// WebDataset grouping: member names -> (key, field), consecutive members with
// one key -> one GroupedSample.
#include "wds/internal/tar/tar_grouping.h"

#include <utility>

#include "wds/internal/base/strings.h"

namespace wds {
namespace {

// kMembersReserved is room for a typical sample's members (an image, a label,
// some metadata), so that gathering one allocates once.
constexpr size_t kMembersReserved = 4;

// PreviousPrefixEnd is the largest position below `end` that starts a path
// segment (0, or just after a '/').
size_t PreviousPrefixEnd(std::string_view name, size_t end) {
  if (end < 2) return 0;
  const size_t slash = name.rfind('/', end - 2);
  return slash == std::string_view::npos ? 0 : slash + 1;
}

}  // namespace

std::optional<MemberName> SplitMemberName(std::string_view name) {
  // Mirrors the reference's ^((?:.*/|)[^.]+)[.]([^/]*)$ with its backtracking:
  // key = a prefix that is empty or ends in '/' (and, as Python's '.' does
  // not match a newline, holds none) followed by a non-empty dot-free run;
  // the split dot must come after the last '/'. Longer prefixes are tried
  // first, as the greedy '.*' does, so "dir/.hidden" gives ("dir/", "hidden").
  const size_t last_slash = name.rfind('/');
  const size_t newline = name.find('\n');
  size_t start = last_slash == std::string_view::npos ? 0 : last_slash + 1;
  while (true) {
    if (newline == std::string_view::npos || newline >= start) {
      const size_t dot = name.find('.', start);
      if (dot == std::string_view::npos) return std::nullopt;
      if (last_slash != std::string_view::npos && dot < last_slash) return std::nullopt;
      if (dot > start) return MemberName{name.substr(0, dot), name.substr(dot + 1)};
    }
    if (start == 0) return std::nullopt;
    start = PreviousPrefixEnd(name, start);
  }
}

bool IsMetadataName(std::string_view name) {
  // The reference skips a top-level "__x__" and anything matching
  // __[^/]*__($|/) at the start ('$' also matching before a final newline).
  if (!StartsWith(name, "__")) return false;
  const size_t slash = name.find('/');
  if (slash == std::string_view::npos) {
    return EndsWith(name, "__") || (name.size() >= 5 && EndsWith(name, "__\n"));
  }
  return slash >= 4 && name.substr(slash - 2, 2) == "__";
}

bool IsWritableKey(std::string_view key) {
  const size_t slash = key.rfind('/');
  const std::string_view base = slash == std::string_view::npos ? key : key.substr(slash + 1);
  return !base.empty() && base.find('.') == std::string_view::npos;
}

absl::StatusOr<std::unique_ptr<ShardSampleReader>> ShardSampleReader::Open(
    std::unique_ptr<ByteStream> stream, ShardSampleReaderOptions options) {
  auto decision = std::make_shared<Decision>();
  if (options.member_name) {
    // The hook is asked as the tar reader meets the member's header; an
    // error reads the data (Next reports it as before).
    options.tar.want = [hook = options.member_name, decision](std::string_view name) {
      if (IsMetadataName(name)) return true;
      decision->answer = hook(name);
      decision->made = true;
      return !decision->answer.ok() || decision->answer->has_value();
    };
  }
  absl::StatusOr<std::unique_ptr<TarReader>> reader =
      TarReader::Open(std::move(stream), options.tar);
  if (!reader.ok()) return reader.status();
  auto out = std::unique_ptr<ShardSampleReader>(
      new ShardSampleReader(*std::move(reader), std::move(options)));
  out->decision_ = std::move(decision);
  return out;
}

ShardSampleReader::ShardSampleReader(std::unique_ptr<TarReader> reader,
                                     ShardSampleReaderOptions options)
    : reader_(std::move(reader)), options_(std::move(options)) {}

ShardSampleReader::~ShardSampleReader() = default;

const std::string& ShardSampleReader::url() const { return reader_->url(); }

absl::StatusOr<std::optional<GroupedSample>> ShardSampleReader::Next() {
  if (pending_error_.has_value()) return *pending_error_;
  if (ended_) return std::nullopt;
  while (true) {
    absl::StatusOr<std::optional<TarMember>> member = reader_->Next();
    if (!member.ok()) {
      pending_error_ = member.status();
      // A failure in a member of another key proves the sample in progress
      // complete; a failure in one of its own members, or between members,
      // cuts it short.
      const std::string& failed = reader_->failed_member();
      const std::optional<MemberName> split = SplitMemberName(failed);
      const bool other_key = !failed.empty() && (!split.has_value() || split->key != current_.key);
      if (!current_.members.empty() && other_key) return std::exchange(current_, {});
      current_ = {};
      return *pending_error_;
    }
    if (!member->has_value()) {
      ended_ = true;
      if (current_.members.empty()) return std::nullopt;
      return std::exchange(current_, {});
    }
    TarMember& m = **member;
    std::string_view name = m.name;
    if (options_.member_name && !IsMetadataName(name)) {
      // Asked already, before the data was read (Open), unless the reader
      // reads no data at all.
      absl::StatusOr<std::optional<std::string>> renamed =
          decision_->made ? std::move(decision_->answer) : options_.member_name(name);
      decision_->made = false;
      if (!renamed.ok()) {
        pending_error_ = renamed.status();
        if (!current_.members.empty()) return std::exchange(current_, {});
        return *pending_error_;
      }
      if (!renamed->has_value()) continue;
      renamed_ = **std::move(renamed);
      name = renamed_;
    }
    const std::optional<MemberName> split = SplitMemberName(name);
    if (IsMetadataName(m.name) || !split.has_value()) {
      if (options_.on_skipped && !options_.on_skipped(m)) {
        ended_ = true;
        return std::nullopt;
      }
      continue;
    }
    std::optional<GroupedSample> completed;
    if (!current_.members.empty() && split->key != current_.key) {
      completed = std::exchange(current_, {});
    }
    if (current_.members.empty()) {
      current_.key.assign(split->key);
      current_.members.reserve(kMembersReserved);
    }
    current_.members.push_back({std::string(split->field), std::move(m)});
    if (completed.has_value()) return completed;
  }
}

}  // namespace wds
