// The member-name hook of the grouping (ShardSampleReaderOptions::member_name,
// WebDatasetOptions::member_name): what the Python bindings' select_files and
// rename_files go through, with the reference's order and error handling.
#include "wds/internal/tar/tar_grouping.h"

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "util/test_util.h"
#include "wds/internal/base/strings.h"
#include "wds/io/byte_stream.h"
#include "wds/pipeline/pipeline.h"
#include "wds/pipeline/web_dataset.h"

namespace wds {
namespace {

using ::testing::ElementsAre;
using testing::FieldText;
using ::testing::HasSubstr;
using testing::Keys;
using testing::MakeTar;

using Hooked = absl::StatusOr<std::optional<std::string>>;

std::vector<std::string> Fields(const Sample& sample) {
  std::vector<std::string> names;
  for (const auto& [name, value] : sample) names.push_back(name);
  return names;
}

// Read runs WebDataset() over `shards` copies of the in-memory shard `tar`
// with `hook`.
absl::StatusOr<std::vector<Sample>> Read(const std::string& tar, MemberNameHook hook,
                                         Handler handler = Handler::kReraise,
                                         std::shared_ptr<ErrorCounters> errors = nullptr,
                                         int shards = 1) {
  WebDatasetOptions options;
  options.nodesplitter = nullptr;
  options.workersplitter = nullptr;
  options.handler = handler;
  options.member_name = std::move(hook);
  options.opener = [tar](std::string_view url) -> absl::StatusOr<std::unique_ptr<ByteStream>> {
    return MemoryStream(std::string(url), tar);
  };
  absl::StatusOr<Pipeline> pipeline =
      WebDataset(std::vector<std::string>(shards, "s.tar"), options);
  if (!pipeline.ok()) return pipeline.status();
  WorkerContext ctx;
  ctx.warn = [](std::string_view) {};
  ctx.errors = std::move(errors);
  std::unique_ptr<SampleStream> stream = pipeline->Open(ctx);
  return testing::Drain(*stream);
}

TEST(MemberNameHookTest, MembersItDropsAreSkippedUnread) {
  // select_files keeping the small fields of samples with a 4 MiB one: the
  // big members are moved past (ByteStream::Skip), not read, and the hook
  // is asked once per member.
  std::vector<testing::TarEntry> entries;
  for (const std::string key : {"a", "b", "c"}) {
    entries.push_back({key + ".bin", std::string(4 << 20, key[0])});
    entries.push_back({key + ".txt", "text of " + key});
  }
  const std::string tar = MakeTar(entries);
  for (const bool drop : {true, false}) {
    int64_t read = 0, skipped = 0;
    int calls = 0;
    ShardSampleReaderOptions options;
    options.member_name = [&](std::string_view name) -> Hooked {
      ++calls;
      if (drop && name.substr(name.size() - 4) == ".bin") return std::nullopt;
      return std::string(name);
    };
    absl::StatusOr<std::unique_ptr<ShardSampleReader>> reader =
        ShardSampleReader::Open(std::make_unique<testing::CountingStream>(
                                    MemoryStream("mem://s.tar", tar), &read, &skipped),
                                options);
    ASSERT_TRUE(reader.ok()) << reader.status();
    std::vector<std::string> got;
    while (true) {
      absl::StatusOr<std::optional<GroupedSample>> sample = (*reader)->Next();
      ASSERT_TRUE(sample.ok()) << sample.status();
      if (!sample->has_value()) break;
      for (const auto& [field, member] : (*sample)->members) {
        got.push_back(Cat((*sample)->key, ".", field, "=", member.data.size()));
      }
    }
    EXPECT_EQ(calls, 6);
    EXPECT_EQ(read + skipped, static_cast<int64_t>(tar.size()));
    if (drop) {
      EXPECT_THAT(got, ElementsAre("a.txt=9", "b.txt=9", "c.txt=9"));
      EXPECT_LT(read, 4 << 20);  // less than one big member
    } else {
      EXPECT_THAT(got, ElementsAre("a.bin=4194304", "a.txt=9", "b.bin=4194304", "b.txt=9",
                                   "c.bin=4194304", "c.txt=9"));
      EXPECT_GT(read, 3 * (4 << 20));
    }
  }
}

TEST(MemberNameHookTest, SkipsAndRenamesBeforeGrouping) {
  const std::string tar =
      MakeTar({{"a.jpg", "J"}, {"a.txt", "T"}, {"a.cls", "1"}, {"b.jpg", "J2"}, {"b.txt", "T2"}});
  absl::StatusOr<std::vector<Sample>> got = Read(tar, [](std::string_view name) -> Hooked {
    if (name.substr(name.size() - 4) == ".jpg") return std::nullopt;
    if (name == "a.txt") return std::string("a.text");
    return std::string(name);
  });
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_THAT(Keys(*got), ElementsAre("a", "b"));
  EXPECT_THAT(Fields((*got)[0]), ElementsAre("__key__", "__url__", "text", "cls"));
  EXPECT_EQ(FieldText((*got)[0], "text"), "T");
  EXPECT_THAT(Fields((*got)[1]), ElementsAre("__key__", "__url__", "txt"));
}

TEST(MemberNameHookTest, RenamingIntoAnotherKeyMergesConsecutiveMembers) {
  const std::string tar = MakeTar({{"a.txt", "1"}, {"b.cls", "2"}, {"c.txt", "3"}});
  absl::StatusOr<std::vector<Sample>> got = Read(tar, [](std::string_view name) -> Hooked {
    if (name == "b.cls") return std::string("a.cls");
    return std::string(name);
  });
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_THAT(Keys(*got), ElementsAre("a", "c"));
  EXPECT_THAT(Fields((*got)[0]), ElementsAre("__key__", "__url__", "txt", "cls"));
}

TEST(MemberNameHookTest, RenamingIntoAnExistingFieldIsADuplicateNamingTheTarMember) {
  const std::string tar = MakeTar({{"a.txt", "1"}, {"a.cls", "2"}});
  absl::StatusOr<std::vector<Sample>> got =
      Read(tar, [](std::string_view name) -> Hooked { return std::string("a.txt"); });
  ASSERT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(got.status().message(), HasSubstr("duplicate field 'txt' in sample a (member a.cls"));
}

TEST(MemberNameHookTest, MetadataNamesNeverReachTheHookButRenamedNamesAreGrouped) {
  const std::string tar = MakeTar({{"__meta__", "m"},
                                   {"__x__/y.txt", "q"},
                                   {"dir/sub/.cfg.json", "{}"},
                                   {"noext", "n"},
                                   {"a.txt", "1"}});
  std::vector<std::string> seen;
  absl::StatusOr<std::vector<Sample>> got = Read(tar, [&seen](std::string_view name) -> Hooked {
    seen.emplace_back(name);
    if (name == "noext") return std::string("__y__.txt");
    return std::string(name);
  });
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_THAT(seen, ElementsAre("dir/sub/.cfg.json", "noext", "a.txt"));
  // The reference checks metadata names on the tar's name only: a member
  // renamed to "__y__.txt" is grouped under key "__y__".
  EXPECT_THAT(Keys(*got), ElementsAre("dir/sub/", "__y__", "a"));
}

TEST(MemberNameHookTest, ErrorsGoToTheHandlerOneMemberAtATime) {
  const std::string tar = MakeTar({{"a.txt", "1"}, {"b.txt", "2"}, {"c.txt", "3"}});
  auto failing = [](std::string_view name) -> Hooked {
    if (name == "b.txt") return absl::NotFoundError("no name for b.txt");
    return std::string(name);
  };
  absl::StatusOr<std::vector<Sample>> raised = Read(tar, failing);
  EXPECT_EQ(raised.status(), absl::NotFoundError("no name for b.txt"));  // the error as it is

  auto errors = std::make_shared<ErrorCounters>();
  absl::StatusOr<std::vector<Sample>> skipped =
      Read(tar, failing, Handler::kIgnoreAndContinue, errors);
  ASSERT_TRUE(skipped.ok()) << skipped.status();
  EXPECT_THAT(Keys(*skipped), ElementsAre("a", "c"));  // only that member is dropped
  EXPECT_EQ(errors->Total(), 1);                       // handed over once

  // Stopping yields the sample in progress ("a") and ends that shard only
  // (here, every shard is s.tar); raising yields nothing more.
  absl::StatusOr<std::vector<Sample>> stopped =
      Read(tar, failing, Handler::kIgnoreAndStop, nullptr, 2);
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  EXPECT_THAT(Keys(*stopped), ElementsAre("a", "a"));
  WebDatasetOptions options;
  options.nodesplitter = nullptr;
  options.workersplitter = nullptr;
  options.member_name = failing;
  options.opener = [tar](std::string_view url) -> absl::StatusOr<std::unique_ptr<ByteStream>> {
    return MemoryStream(std::string(url), tar);
  };
  absl::StatusOr<Pipeline> pipeline = WebDataset(std::vector<std::string>{"s.tar"}, options);
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  std::unique_ptr<SampleStream> stream = pipeline->Open(WorkerContext());
  EXPECT_EQ(stream->Next().status(), absl::NotFoundError("no name for b.txt"));
}

TEST(MemberNameHookTest, AnErrorComesAfterTheSampleInProgress) {
  const std::string tar = MakeTar({{"a.txt", "1"}, {"a.cls", "2"}, {"b.txt", "3"}});
  ShardSampleReaderOptions options;
  options.member_name = [](std::string_view name) -> Hooked {
    if (name == "a.cls") return absl::InternalError("boom");
    return std::string(name);
  };
  absl::StatusOr<std::unique_ptr<ShardSampleReader>> reader =
      ShardSampleReader::Open(MemoryStream("mem://s", tar), std::move(options));
  ASSERT_TRUE(reader.ok()) << reader.status();
  absl::StatusOr<std::optional<GroupedSample>> first = (*reader)->Next();
  ASSERT_TRUE(first.ok() && first->has_value()) << first.status();
  EXPECT_EQ((*first)->key, "a");
  ASSERT_EQ((*first)->members.size(), 1u);
  EXPECT_EQ((*first)->members[0].field, "txt");
  EXPECT_EQ((*reader)->Next().status(), absl::InternalError("boom"));
  EXPECT_EQ((*reader)->Next().status(), absl::InternalError("boom"));  // sticky
}

TEST(MemberNameHookTest, WithoutAHookEveryMemberIsGroupedByItsOwnName) {
  absl::StatusOr<std::vector<Sample>> got =
      Read(MakeTar({{"a.txt", "1"}, {"dir/sub/.cfg.json", "{}"}}), nullptr);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_THAT(Keys(*got), ElementsAre("a", "dir/sub/"));
  EXPECT_THAT(Fields((*got)[1]), ElementsAre("__key__", "__url__", "cfg.json"));
}

}  // namespace
}  // namespace wds
