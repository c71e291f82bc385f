// The shared shard cache: one download that both feeds the reader and fills
// the cache, hits served from the local copy, LRU eviction that spares files
// in use, changed objects, abandoned and killed downloads, and several
// processes (wds-shard) sharing one cache directory.
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/sigv4.h"
#include "util/remote_test_util.h"
#include "util/test_util.h"
#include "wds/base/interrupt.h"
#include "wds/internal/base/strings.h"
#include "wds/internal/io/directories.h"
#include "wds/io/remote.h"
#include "wds/tar/shard_index.h"

namespace wds {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;
using ::testing::UnorderedElementsAre;
using ::wds::testing::FaultPlan;
using ::wds::testing::FaultRequest;
using ::wds::testing::FaultServer;
using ::wds::testing::Sha256;

std::string RandomBytes(size_t size, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string out(size, '\0');
  for (char& c : out) c = static_cast<char>(rng());
  return out;
}

absl::StatusOr<std::string> ReadAll(ByteStream& stream) {
  std::string out;
  std::vector<char> buffer(65536);
  while (true) {
    absl::StatusOr<size_t> n = stream.Read(buffer.data(), buffer.size());
    if (!n.ok()) return n.status();
    if (*n == 0) return out;
    out.append(buffer.data(), *n);
  }
}

std::string Message(const absl::Status& s) { return std::string(ToStd(s.message())); }

// Names lists the cache directory but for its ledger (".size", which the
// ledger tests look at).
std::vector<std::string> Names(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name != ".size") names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string Hash(const std::string& url) { return sigv4::Sha256Hex(url); }

class ShardCacheTest : public ::testing::Test {
 protected:
  ShardCacheTest() {
    for (int i = 0; i < 3; ++i) {
      bodies_.push_back(RandomBytes(300'000, i + 1));
      server_.Put(Cat("/", i, ".tar"), bodies_[i]);
    }
    options_.cache_dir = cache_.path() + "/cache";
    options_.backoff_base = std::chrono::milliseconds(1);
    options_.backoff_cap = std::chrono::milliseconds(5);
    options_.stall_timeout = std::chrono::milliseconds(300);
    options_.aws_credentials_file = "/nonexistent";
  }
  std::string url(int i) const { return server_.Url(Cat("/", i, ".tar")); }
  std::string cached(int i) const { return Cat(options_.cache_dir, "/", Hash(url(i))); }
  absl::StatusOr<std::string> Fetch(int i, const Opener& open) {
    absl::StatusOr<std::unique_ptr<ByteStream>> s = open(url(i));
    if (!s.ok()) return s.status();
    absl::StatusOr<std::string> data = ReadAll(**s);
    if (data.ok()) EXPECT_TRUE((*s)->Finish().ok());
    return data;
  }
  void ExpectFetch(int i, const Opener& open) {
    absl::StatusOr<std::string> data = Fetch(i, open);
    ASSERT_TRUE(data.ok()) << data.status();
    EXPECT_EQ(Sha256(*data), Sha256(bodies_[i]));
  }
  std::string Ledger() const { return testing::ReadFile(options_.cache_dir + "/.size"); }
  void SetLedger(const std::string& text) const {
    std::ofstream(options_.cache_dir + "/.size") << text;
  }
  // Scanned is the time of the last scan in the ledger (-1 without one).
  int64_t Scanned() const {
    const std::string ledger = Ledger();
    const size_t at = ledger.find("\nscanned ");
    return at == std::string::npos ? -1 : std::stoll(ledger.substr(at + 9));
  }
  // ScannedNow is true when the ledger's last scan was within a minute.
  bool ScannedNow() const { return Scanned() >= time(nullptr) - 60 && Scanned() <= time(nullptr); }
  // Age sets a cached file's last use `seconds` in the past.
  void Age(int i, int seconds) {
    const auto t = fs::last_write_time(cached(i));
    fs::last_write_time(cached(i), t - std::chrono::seconds(seconds));
  }

  FaultServer server_;
  testing::TempDir cache_;
  RemoteOptions options_;
  std::vector<std::string> bodies_;
};

TEST_F(ShardCacheTest, AMissDownloadsOnceAndLaterReadsAreLocal) {
  Opener open = MakeOpener(options_);
  ExpectFetch(0, open);
  EXPECT_EQ(server_.requests(), 1);
  EXPECT_THAT(Names(options_.cache_dir), ElementsAre(Hash(url(0)), Cat(Hash(url(0)), ".meta")));
  EXPECT_EQ(Sha256(testing::ReadFile(cached(0))), Sha256(bodies_[0]));
  EXPECT_EQ(testing::ReadFile(cached(0) + ".meta"),
            Cat("url ", url(0), "\netag \"v1\"\nsize 300000\n"));
  // The ledger counts it: made by this download (the directory did not
  // exist at the first open), by a scan of the directory.
  EXPECT_THAT(Ledger(), StartsWith("bytes 300000\nscanned "));
  EXPECT_TRUE(ScannedNow()) << Ledger();
  // Another opener (another process, say) reads the local copy.
  ExpectFetch(0, MakeOpener(options_));
  ExpectFetch(0, open);
  EXPECT_EQ(server_.requests(), 1);
}

TEST_F(ShardCacheTest, AResumedDownloadIsCachedByteExact) {
  server_.SetPlanner([](const FaultRequest& r) {
    return r.index == 0 ? FaultPlan{.close_after = 100'000, .reset = true} : FaultPlan();
  });
  ExpectFetch(0, MakeOpener(options_));
  EXPECT_EQ(server_.requests(), 2);
  EXPECT_EQ(Sha256(testing::ReadFile(cached(0))), Sha256(bodies_[0]));
}

TEST_F(ShardCacheTest, AnObjectChangedMidDownloadLeavesNothingCached) {
  server_.SetPlanner([this](const FaultRequest& r) {
    if (r.index == 0) return FaultPlan{.close_after = 100'000};
    server_.Put("/0.tar", RandomBytes(300'000, 77), "\"v2\"");
    return FaultPlan();
  });
  absl::Status s = Fetch(0, MakeOpener(options_)).status();
  EXPECT_TRUE(absl::IsAborted(s)) << s;
  EXPECT_THAT(Message(s), HasSubstr(Cat(url(0), ": the object changed while it was read")));
  EXPECT_THAT(Names(options_.cache_dir), IsEmpty());
}

TEST_F(ShardCacheTest, CachedCopiesAreTrustedUnlessRevalidated) {
  ExpectFetch(0, MakeOpener(options_));
  const std::string v2 = RandomBytes(300'000, 42);
  server_.Put("/0.tar", v2, "\"v2\"");
  ExpectFetch(0, MakeOpener(options_));  // the old copy, by design
  EXPECT_EQ(server_.requests(), 1);

  RemoteOptions revalidating = options_;
  revalidating.cache_revalidate = true;
  absl::StatusOr<std::string> data = Fetch(0, MakeOpener(revalidating));
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(Sha256(*data), Sha256(v2));
  EXPECT_EQ(Sha256(testing::ReadFile(cached(0))), Sha256(v2));
  EXPECT_THAT(testing::ReadFile(cached(0) + ".meta"), HasSubstr("etag \"v2\""));
  // The new copy replaced the old one in the ledger too.
  EXPECT_THAT(Ledger(), StartsWith("bytes 300000\nscanned "));
  std::vector<FaultRequest> log = server_.log();
  ASSERT_EQ(log.size(), 3u);
  EXPECT_EQ(log[1].method, "HEAD");
  // Unchanged now: one HEAD, no download.
  data = Fetch(0, MakeOpener(revalidating));
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(server_.requests(), 4);
  EXPECT_EQ(server_.log().back().method, "HEAD");
}

TEST_F(ShardCacheTest, AnAbandonedDownloadLeavesNoPartFile) {
  {
    absl::StatusOr<std::unique_ptr<ByteStream>> s = MakeOpener(options_)(url(0));
    ASSERT_TRUE(s.ok()) << s.status();
    char buffer[1000];
    ASSERT_TRUE((*s)->Read(buffer, sizeof(buffer)).ok());
    EXPECT_THAT(Names(options_.cache_dir), ElementsAre(Cat(Hash(url(0)), ".part")));
  }
  EXPECT_THAT(Names(options_.cache_dir), IsEmpty());
}

TEST_F(ShardCacheTest, ASecondReaderDuringTheDownloadStreamsUncached) {
  Opener open = MakeOpener(options_);
  absl::StatusOr<std::unique_ptr<ByteStream>> first = open(url(0));
  ASSERT_TRUE(first.ok()) << first.status();
  char buffer[1000];
  ASSERT_TRUE((*first)->Read(buffer, sizeof(buffer)).ok());
  ExpectFetch(0, open);  // not blocked by the first, not cached by it either
  EXPECT_THAT(Names(options_.cache_dir), ElementsAre(Cat(Hash(url(0)), ".part")));
  absl::StatusOr<std::string> rest = ReadAll(**first);
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_EQ(Sha256(std::string(buffer, sizeof(buffer)) + *rest), Sha256(bodies_[0]));
  EXPECT_THAT(Names(options_.cache_dir), ElementsAre(Hash(url(0)), Cat(Hash(url(0)), ".meta")));
  EXPECT_EQ(server_.requests(), 2);
}

TEST_F(ShardCacheTest, TheSizeLimitEvictsTheLeastRecentlyUsed) {
  options_.cache_size = 700'000;  // two of the three objects
  Opener open = MakeOpener(options_);
  ExpectFetch(0, open);
  ExpectFetch(1, open);
  Age(0, 20);
  Age(1, 10);
  ExpectFetch(0, open);  // a hit: 0 is now the most recently used
  EXPECT_EQ(server_.requests(), 2);
  ExpectFetch(2, open);
  EXPECT_TRUE(fs::exists(cached(0)));
  EXPECT_FALSE(fs::exists(cached(1)));
  EXPECT_FALSE(fs::exists(cached(1) + ".meta"));
  EXPECT_TRUE(fs::exists(cached(2)));
}

TEST_F(ShardCacheTest, AFileInUseIsNeverEvicted) {
  options_.cache_size = 400'000;  // one object
  Opener open = MakeOpener(options_);
  ExpectFetch(0, open);
  Age(0, 20);
  {
    absl::StatusOr<std::unique_ptr<ByteStream>> reading = open(url(0));  // a hit, held open
    ASSERT_TRUE(reading.ok());
    ExpectFetch(1, open);
    EXPECT_TRUE(fs::exists(cached(0)));
    EXPECT_TRUE(fs::exists(cached(1)));
    absl::StatusOr<std::string> data = ReadAll(**reading);
    ASSERT_TRUE(data.ok());
    EXPECT_EQ(Sha256(*data), Sha256(bodies_[0]));
  }
  Age(0, 20);
  Age(1, 10);
  ExpectFetch(2, open);
  EXPECT_FALSE(fs::exists(cached(0)));
  EXPECT_FALSE(fs::exists(cached(1)));
  EXPECT_TRUE(fs::exists(cached(2)));
}

TEST_F(ShardCacheTest, ACacheDirectoryThatCannotBeMadeIsAnError) {
  options_.cache_dir = cache_.Write("file", "not a directory") + "/cache";
  absl::Status s = Fetch(0, MakeOpener(options_)).status();
  EXPECT_EQ(Message(s), Cat(url(0), ": cannot create ", options_.cache_dir, "/", Hash(url(0)),
                            ".part in the cache: Not a directory"));
  EXPECT_EQ(server_.requests(), 0);
}

TEST_F(ShardCacheTest, StaleFilesAreCleanedUp) {
  fs::create_directories(options_.cache_dir);
  // A .part no process holds (its writer died), a .meta without data, and a
  // .meta's temporary file an hour old (its writer was killed mid-write).
  const std::string stale = Cat(options_.cache_dir, "/", Hash("http://gone/x.tar"));
  std::ofstream(stale + ".part") << "half a shard";
  std::ofstream(stale + ".meta") << "url http://gone/x.tar\n";
  std::ofstream(stale + ".meta.4242.tmp") << "url http://go";
  const auto hour_ago = fs::file_time_type::clock::now() - std::chrono::seconds(3601);
  fs::last_write_time(stale + ".meta.4242.tmp", hour_ago);
  // Kept: a temporary file being written now, and names that are not the cache's.
  const std::string fresh = Cat(Hash("http://busy/y.tar"), ".meta.4243.tmp");
  const std::string other = Cat(Hash("http://gone/x.tar"), ".meta.12ab.tmp");
  for (const std::string& name : {fresh, other}) {
    std::ofstream(Cat(options_.cache_dir, "/", name)) << "url";
  }
  fs::last_write_time(Cat(options_.cache_dir, "/", other), hour_ago);
  ExpectFetch(0, MakeOpener(options_));
  std::vector<std::string> expected = {Hash(url(0)), Cat(Hash(url(0)), ".meta"), fresh, other};
  std::sort(expected.begin(), expected.end());
  EXPECT_THAT(Names(options_.cache_dir), ElementsAreArray(expected));
}

TEST_F(ShardCacheTest, AKilledDownloadLeavesAPartThatIsTakenOverAndCleaned) {
  const std::string tar = testing::MakeTar({{"a.bin", RandomBytes(400'000, 5)}, {"a.cls", "1"}});
  server_.Put("/k.tar", tar);
  const std::string url = server_.Url("/k.tar");
  server_.SetPlanner([](const FaultRequest& r) {
    return r.index == 0 ? FaultPlan{.stall_after = 200'000, .stall_ms = 30'000} : FaultPlan();
  });
  const std::string part = Cat(options_.cache_dir, "/", Hash(url), ".part");
  {
    testing::Subprocess child({testing::ToolPath("wds-shard"), "ls", url},
                              {Cat("WDS_CACHE=", options_.cache_dir)});
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline &&
           !(fs::exists(part) && fs::file_size(part) >= 200'000)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_TRUE(fs::exists(part));
    child.Kill(SIGKILL);
    EXPECT_TRUE(WIFSIGNALED(child.Wait()));
  }
  EXPECT_EQ(fs::file_size(part), 200'000u);  // left behind, unlocked
  absl::StatusOr<std::unique_ptr<ByteStream>> s = MakeOpener(options_)(url);
  ASSERT_TRUE(s.ok()) << s.status();
  absl::StatusOr<std::string> data = ReadAll(**s);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(Sha256(*data), Sha256(tar));
  EXPECT_THAT(Names(options_.cache_dir), ElementsAre(Hash(url), Cat(Hash(url), ".meta")));
  EXPECT_EQ(Sha256(testing::ReadFile(Cat(options_.cache_dir, "/", Hash(url)))), Sha256(tar));
}

TEST_F(ShardCacheTest, ProcessesShareOneCache) {
  std::vector<testing::TarEntry> entries;
  for (int i = 0; i < 30; ++i) {
    entries.push_back({Cat("s", i, ".bin"), RandomBytes(30'000, 100 + i)});
    entries.push_back({Cat("s", i, ".cls"), std::to_string(i)});
  }
  const std::string tar = testing::MakeTar(entries);
  server_.Put("/shared.tar", tar);
  const std::string url = server_.Url("/shared.tar");
  // The first reader's download stops after its first chunk until the test
  // lets it go on: the three others start once its .part exists, so each
  // finds it locked and, by design, streams from the server without waiting
  // or writing the cache. Exactly four downloads, one of them cached; none
  // waits for another.
  auto release = std::make_shared<std::atomic<bool>>(false);
  server_.SetPlanner([release](const FaultRequest& r) {
    if (r.index != 0) return FaultPlan();
    return FaultPlan{.stall_after = 16 * 1024,
                     .stall_ms = 60'000,
                     .until = [release] { return release->load(); }};
  });
  testing::TempDir out;
  std::vector<std::unique_ptr<testing::Subprocess>> readers;
  const std::string part = Cat(options_.cache_dir, "/", Hash(url), ".part");
  for (int i = 0; i < 4; ++i) {
    readers.push_back(std::make_unique<testing::Subprocess>(
        std::vector<std::string>{testing::ToolPath("wds-shard"), "ls", "--json", url},
        std::vector<std::string>{Cat("WDS_CACHE=", options_.cache_dir)}, Cat(out.path(), "/out", i),
        Cat(out.path(), "/err", i)));
    if (i == 0) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (std::chrono::steady_clock::now() < deadline &&
             !(fs::exists(part) && fs::file_size(part) > 0)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      ASSERT_TRUE(fs::exists(part));
    }
  }
  for (int i = 3; i >= 0; --i) {
    if (i == 0) {
      // The uncached readers finished while the cached download waits.
      EXPECT_TRUE(readers[0]->running());
      release->store(true);
    }
    const int status = readers[i]->Wait();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }
  const std::string expected = testing::ReadFile(Cat(out.path(), "/out0"));
  EXPECT_THAT(expected, HasSubstr("\"__key__\": \"s29\""));
  for (int i = 1; i < 4; ++i) EXPECT_EQ(testing::ReadFile(Cat(out.path(), "/out", i)), expected);
  EXPECT_THAT(Names(options_.cache_dir), ElementsAre(Hash(url), Cat(Hash(url), ".meta")));
  EXPECT_EQ(Sha256(testing::ReadFile(Cat(options_.cache_dir, "/", Hash(url)))), Sha256(tar));
  EXPECT_THAT(Ledger(), StartsWith(Cat("bytes ", tar.size(), "\n")));  // one copy, counted once
  const int downloads = server_.requests();
  EXPECT_EQ(downloads, 4);
  for (const FaultRequest& r : server_.log()) EXPECT_EQ(r.headers.count("range"), 0u);
  // A later process reads the local copy.
  testing::Subprocess later({testing::ToolPath("wds-shard"), "ls", "--json", url},
                            {Cat("WDS_CACHE=", options_.cache_dir)}, Cat(out.path(), "/later"));
  EXPECT_EQ(later.Wait(), 0);
  EXPECT_EQ(testing::ReadFile(Cat(out.path(), "/later")), expected);
  EXPECT_EQ(server_.requests(), downloads);
}

TEST_F(ShardCacheTest, AProcessThatOnlyHitsStillCleansUp) {
  // Two complete copies over the limit, and a stale download, left by
  // others: the first open in this process cleans up before its hit.
  ExpectFetch(0, MakeOpener(options_));
  ExpectFetch(1, MakeOpener(options_));
  Age(0, 20);
  Age(1, 10);
  const std::string stale = Cat(options_.cache_dir, "/", Hash("http://gone/x.tar"), ".part");
  std::ofstream(stale) << "half a shard";
  // A new directory name for the same directory: housekeeping runs once per
  // process per cache directory, and this process has opened the first name.
  options_.cache_dir += "/.";
  options_.cache_size = 400'000;
  const int requests = server_.requests();
  ExpectFetch(1, MakeOpener(options_));  // a hit
  EXPECT_EQ(server_.requests(), requests);
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_FALSE(fs::exists(cached(0)));
  EXPECT_TRUE(fs::exists(cached(1)));
  // Once per process: later stale files wait for the next scan.
  std::ofstream(stale) << "half a shard";
  ExpectFetch(1, MakeOpener(options_));
  EXPECT_TRUE(fs::exists(stale));
}

TEST_F(ShardCacheTest, AFullCacheIsScannedWhenItsLedgerPassesTheLimitNotAtEveryDownload) {
  for (int i = 3; i < 13; ++i) {
    bodies_.push_back(RandomBytes(300'000, i + 1));
    server_.Put(Cat("/", i, ".tar"), bodies_[i]);
  }
  options_.cache_size = 3'000'000;  // ten objects; a scan evicts down to 2,700,000
  Opener open = MakeOpener(options_);
  for (int i = 0; i < 10; ++i) {
    ExpectFetch(i, open);
    Age(i, 100 - i);  // 0 the least recently used
  }
  SetLedger("bytes 3000000\nscanned 1\n");  // as the downloads left it, but for the time
  // A stale download shows whether a scan ran: each scan removes it.
  const std::string stale = Cat(options_.cache_dir, "/", Hash("http://gone/x.tar"), ".part");
  std::ofstream(stale) << "half a shard";
  ExpectFetch(10, open);  // 3,300,000: over the limit
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_FALSE(fs::exists(cached(0)));
  EXPECT_FALSE(fs::exists(cached(0) + ".meta"));
  EXPECT_FALSE(fs::exists(cached(1)));
  for (int i = 2; i <= 10; ++i) EXPECT_TRUE(fs::exists(cached(i))) << i;
  EXPECT_THAT(Ledger(), StartsWith("bytes 2700000\nscanned "));
  EXPECT_TRUE(ScannedNow()) << Ledger();
  SetLedger("bytes 2700000\nscanned 1\n");
  std::ofstream(stale) << "half a shard";
  ExpectFetch(11, open);  // 3,000,000: at the limit, not over it: no scan
  EXPECT_TRUE(fs::exists(stale));
  EXPECT_EQ(Ledger(), "bytes 3000000\nscanned 1\n");
  ExpectFetch(12, open);  // over again: the next two least recently used go
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_FALSE(fs::exists(cached(2)));
  EXPECT_FALSE(fs::exists(cached(3)));
  for (int i = 4; i <= 12; ++i) EXPECT_TRUE(fs::exists(cached(i))) << i;
  EXPECT_THAT(Ledger(), StartsWith("bytes 2700000\nscanned "));
  EXPECT_TRUE(ScannedNow()) << Ledger();
  EXPECT_EQ(server_.requests(), 13);
}

TEST_F(ShardCacheTest, AProcessScansAtItsFirstOpenOnlyWhenAScanIsDue) {
  ExpectFetch(0, MakeOpener(options_));
  const std::string stale = Cat(options_.cache_dir, "/", Hash("http://gone/x.tar"), ".part");
  // Each new name for the directory is a first open in this process.
  auto first_open = [&] {
    options_.cache_dir += "/.";
    ExpectFetch(0, MakeOpener(options_));  // a hit
  };
  std::ofstream(stale) << "half a shard";
  first_open();  // scanned a moment ago, under the limit: no scan
  EXPECT_TRUE(fs::exists(stale));
  SetLedger(Cat("bytes 300000\nscanned ", time(nullptr) - 3600, "\n"));
  first_open();  // scanned an hour ago: a scan
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(ScannedNow()) << Ledger();
  std::ofstream(stale) << "half a shard";
  SetLedger("bytes 300000\nscanned 0\n");  // never scanned
  first_open();
  EXPECT_FALSE(fs::exists(stale));
  std::ofstream(stale) << "half a shard";
  first_open();
  EXPECT_TRUE(fs::exists(stale));
  options_.cache_size = 200'000;
  // Over this process's limit: a scan, which evicts the copy before the
  // open looks for it; downloaded again, and kept though alone over the limit.
  first_open();
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_EQ(server_.requests(), 2);
  EXPECT_TRUE(fs::exists(cached(0)));
  EXPECT_THAT(Ledger(), StartsWith("bytes 300000\n"));
}

TEST_F(ShardCacheTest, AWrongOrUnreadableLedgerIsWrittenAnewByAScan) {
  Opener open = MakeOpener(options_);
  ExpectFetch(0, open);
  ExpectFetch(1, open);
  EXPECT_THAT(Ledger(), StartsWith("bytes 600000\n"));
  // A copy removed by hand leaves the ledger high until the next scan.
  fs::remove(cached(1));
  fs::remove(cached(1) + ".meta");
  SetLedger("bytes 600000\nscanned 0\n");
  options_.cache_dir += "/.";
  ExpectFetch(0, MakeOpener(options_));
  EXPECT_THAT(Ledger(), StartsWith("bytes 300000\nscanned "));
  // An unreadable ledger (a process killed while writing it, say): the next
  // download scans and writes it anew.
  for (const char* text : {"", "garbage", "bytes -5\nscanned 0\n", "bytes 1\nscanned -2\n",
                           "bytes 1\nscanned 2\nmore\n", "bytes 99999999999999999999\nscanned 0\n",
                           "bytes 600000\nscanned 1\n\n"}) {
    SetLedger(text);
    const std::string stale = Cat(options_.cache_dir, "/", Hash("http://gone/x.tar"), ".part");
    std::ofstream(stale) << "half a shard";
    fs::remove(cached(1));
    fs::remove(cached(1) + ".meta");
    ExpectFetch(1, open);
    EXPECT_FALSE(fs::exists(stale)) << text;
    EXPECT_THAT(Ledger(), StartsWith("bytes 600000\nscanned ")) << text;
    EXPECT_TRUE(ScannedNow()) << text;
  }
  // A ledger near the top of int64 saturates instead of overflowing; the
  // scan it causes corrects it.
  const std::string long_ago = std::to_string(time(nullptr) - 7200);
  SetLedger(Cat("bytes 9223372036854775000\nscanned ", long_ago, "\n"));
  fs::remove(cached(1));
  fs::remove(cached(1) + ".meta");
  ExpectFetch(1, open);
  EXPECT_EQ(Ledger(), Cat("bytes 9223372036854775807\nscanned ", long_ago, "\n"));
  options_.cache_dir += "/.";
  ExpectFetch(0, MakeOpener(options_));
  EXPECT_THAT(Ledger(), StartsWith("bytes 600000\nscanned "));
}

TEST_F(ShardCacheTest, ADownloadWaitsForAScanInProgressAndIsCountedOnce) {
  Opener open = MakeOpener(options_);
  ExpectFetch(0, open);
  const std::string part = cached(1) + ".part";
  {
    // Another process's scan holds the ledger (a flock on another open file
    // conflicts in this process too).
    const int scanning = ::open(Cat(options_.cache_dir, "/.size").c_str(), O_RDWR);
    ASSERT_GE(scanning, 0);
    ASSERT_EQ(flock(scanning, LOCK_EX), 0);
    std::thread download([&] { ExpectFetch(1, open); });
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline &&
           !(fs::exists(part) && fs::file_size(part) == 300'000)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    // Arrived whole, but not put in place while the scan runs: the scan's
    // total cannot have counted it, so the download counts it after.
    EXPECT_TRUE(fs::exists(part));
    EXPECT_FALSE(fs::exists(cached(1)));
    SetLedger("bytes 300000\nscanned 7\n");  // what the scan writes
    close(scanning);
    download.join();
  }
  EXPECT_TRUE(fs::exists(cached(1)));
  EXPECT_EQ(Ledger(), "bytes 600000\nscanned 7\n");
}

TEST_F(ShardCacheTest, AWaitForTheLedgerEndsWhenTheThreadIsInterrupted) {
  Opener open = MakeOpener(options_);
  ExpectFetch(0, open);
  // A lock left held (a killed process's, kept by its child).
  const int held = ::open(Cat(options_.cache_dir, "/.size").c_str(), O_RDWR);
  ASSERT_GE(held, 0);
  ASSERT_EQ(flock(held, LOCK_EX), 0);
  SetLedger("bytes 300000\nscanned 1\n");
  const auto start = std::chrono::steady_clock::now();
  {
    // A stopped Loader worker, say: its check fails once the wait began.
    ScopedInterruptCheck check([start] {
      return std::chrono::steady_clock::now() - start > std::chrono::milliseconds(200)
                 ? absl::CancelledError("stopped")
                 : absl::OkStatus();
    });
    ExpectFetch(1, open);  // put in place without the ledger
  }
  // Well within the 60 s the wait would last otherwise.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  EXPECT_TRUE(fs::exists(cached(1)));
  EXPECT_EQ(Ledger(), "bytes 300000\nscanned 1\n");  // not counted: the next scan will
  close(held);
}

// ForkedSleeper forks a child that sleeps (a DataLoader worker, say, which
// shares the parent's open files), killed when the test ends however it ends.
class ForkedSleeper {
 public:
  ForkedSleeper() : pid_(fork()) {
    if (pid_ == 0) {
      sleep(60);
      _exit(0);
    }
    EXPECT_GT(pid_, 0);
  }
  ~ForkedSleeper() { Kill(); }
  ForkedSleeper(const ForkedSleeper&) = delete;
  ForkedSleeper& operator=(const ForkedSleeper&) = delete;
  bool alive() const { return pid_ > 0 && waitpid(pid_, nullptr, WNOHANG) == 0; }
  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_;
};

TEST_F(ShardCacheTest, AChildForkedDuringADownloadDoesNotKeepItsCopyLocked) {
  absl::StatusOr<std::unique_ptr<ByteStream>> s = MakeOpener(options_)(url(0));
  ASSERT_TRUE(s.ok()) << s.status();
  char head[1000];
  ASSERT_TRUE((*s)->Read(head, sizeof(head)).ok());
  // A child forked now (a DataLoader starting a worker, say) shares the open
  // .part file and the exclusive lock on it, which becomes the copy's.
  ForkedSleeper child;  // shares the .part's open file and exclusive lock
  absl::StatusOr<std::string> rest = ReadAll(**s);
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_EQ(Sha256(std::string(head, sizeof(head)) + *rest), Sha256(bodies_[0]));
  s->reset();
  // Unlocked by the download, though the child lives: readers (shared
  // locks) and eviction (exclusive) get it at once.
  const int copy = ::open(cached(0).c_str(), O_RDONLY);
  ASSERT_GE(copy, 0);
  const int locked = flock(copy, LOCK_EX | LOCK_NB);
  EXPECT_EQ(locked, 0) << strerror(errno);
  close(copy);
  EXPECT_TRUE(child.alive());
  if (locked != 0) child.Kill();         // else the hit below would wait for it
  ExpectFetch(0, MakeOpener(options_));  // a hit
  EXPECT_EQ(server_.requests(), 1);
}

TEST_F(ShardCacheTest, AChildThatDropsAnInheritedDownloadLeavesItToTheParent) {
  absl::StatusOr<std::unique_ptr<ByteStream>> s = MakeOpener(options_)(url(0));
  ASSERT_TRUE(s.ok()) << s.status();
  char head[1000];
  ASSERT_TRUE((*s)->Read(head, sizeof(head)).ok());
  const pid_t child = fork();
  if (child == 0) {
    s->reset();  // a C++ child destroying what it inherited
    _exit(0);
  }
  ASSERT_GT(child, 0);
  int status = -1;
  for (int i = 0; i < 1000 && waitpid(child, &status, WNOHANG) == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (status == -1) {  // stuck in a library's teardown after fork: what matters is the .part
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
  }
  // The child neither removed nor unlocked the parent's download.
  EXPECT_TRUE(fs::exists(cached(0) + ".part"));
  const int part = ::open((cached(0) + ".part").c_str(), O_RDONLY);
  ASSERT_GE(part, 0);
  EXPECT_NE(flock(part, LOCK_EX | LOCK_NB), 0);
  close(part);
  absl::StatusOr<std::string> rest = ReadAll(**s);
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_EQ(Sha256(std::string(head, sizeof(head)) + *rest), Sha256(bodies_[0]));
  s->reset();
  EXPECT_EQ(Sha256(testing::ReadFile(cached(0))), Sha256(bodies_[0]));
  ExpectFetch(0, MakeOpener(options_));  // a hit
  EXPECT_EQ(server_.requests(), 1);
}

TEST_F(ShardCacheTest, AChildForkedDuringAHitDoesNotKeepTheCopyFromEviction) {
  ExpectFetch(0, MakeOpener(options_));
  absl::StatusOr<std::unique_ptr<ByteStream>> hit = MakeOpener(options_)(url(0));
  ASSERT_TRUE(hit.ok()) << hit.status();
  char head[1000];
  ASSERT_TRUE((*hit)->Read(head, sizeof(head)).ok());
  ForkedSleeper child;  // shares the copy's open file and shared lock
  hit->reset();
  // Released by the reader, though the child lives: eviction may take it.
  const int copy = ::open(cached(0).c_str(), O_RDONLY);
  ASSERT_GE(copy, 0);
  EXPECT_EQ(flock(copy, LOCK_EX | LOCK_NB), 0) << strerror(errno);
  close(copy);
  EXPECT_TRUE(child.alive());
}

TEST_F(ShardCacheTest, OpenAtReadsAHitLocallyAndAMissUncached) {
  RemoteOpener remote(options_);
  // A miss from an offset: one ranged request, nothing cached.
  absl::StatusOr<std::unique_ptr<ByteStream>> miss = remote.OpenAt(url(0), 123'456);
  ASSERT_TRUE(miss.ok()) << miss.status();
  EXPECT_EQ(Sha256(*ReadAll(**miss)), Sha256(bodies_[0].substr(123'456)));
  ASSERT_EQ(server_.requests(), 1);
  EXPECT_EQ(server_.log()[0].headers["range"], "bytes=123456-");
  EXPECT_FALSE(fs::exists(cached(0)));
  EXPECT_FALSE(fs::exists(cached(0) + ".part"));
  // Cached from the start, then read from the offset locally.
  ExpectFetch(0, remote.AsOpener());
  absl::StatusOr<std::unique_ptr<ByteStream>> hit = remote.OpenAt(url(0), 299'999);
  ASSERT_TRUE(hit.ok()) << hit.status();
  EXPECT_EQ(*ReadAll(**hit), bodies_[0].substr(299'999));
  EXPECT_EQ(server_.requests(), 2);
  absl::Status past = remote.OpenAt(url(0), 300'000).status();
  EXPECT_TRUE(absl::IsOutOfRange(past)) << past;
  EXPECT_EQ(Message(past), Cat(url(0), ": offset 300000 is not before the end of its 300000 ",
                               "bytes (cached copy)"));
}

TEST_F(ShardCacheTest, ASkipWhileCachingIsReadIntoTheCache) {
  options_.skip_by_request = 1;
  absl::StatusOr<std::unique_ptr<ByteStream>> s = MakeOpener(options_)(url(0));
  ASSERT_TRUE(s.ok()) << s.status();
  char head[10];
  ASSERT_EQ(*(*s)->Read(head, sizeof(head)), 10u);
  // The stream that fills the cache file does not skip: its reader reads.
  EXPECT_EQ(*(*s)->Skip(200'000), 0);
  EXPECT_EQ(Sha256(std::string(head, 10) + *ReadAll(**s)), Sha256(bodies_[0]));
  EXPECT_EQ(Sha256(testing::ReadFile(cached(0))), Sha256(bodies_[0]));
  // A hit skips by seeking.
  absl::StatusOr<std::unique_ptr<ByteStream>> hit = MakeOpener(options_)(url(0));
  ASSERT_TRUE(hit.ok()) << hit.status();
  EXPECT_EQ(*(*hit)->Skip(299'000), 299'000);
  EXPECT_EQ(*ReadAll(**hit), bodies_[0].substr(299'000));
  EXPECT_EQ(server_.requests(), 1);
}

// --- pipe: shards (RemoteOptions::cache_pipes)

// PipeCacheTest runs commands that log each run into `runs` and print a
// file's bytes (and maybe fail).
class PipeCacheTest : public ShardCacheTest {
 protected:
  PipeCacheTest() {
    body_ = RandomBytes(200'000, 7);
    data_ = dir_.Write("data.bin", body_);
    runs_ = dir_.path() + "/runs";
    options_.cache_pipes = true;
  }
  // Command prints data.bin, then runs `then` ("true", "exit 3").
  std::string Command(const std::string& then = "true") const {
    return Cat("pipe:echo run >> ", runs_, " && cat ", data_, " && ", then);
  }
  int Runs() const {
    const std::string text = testing::ReadFile(runs_);
    return static_cast<int>(std::count(text.begin(), text.end(), '\n'));
  }
  std::string CopyOf(const std::string& url) const {
    return Cat(options_.cache_dir, "/", Hash(url));
  }
  // ReadFinished reads `url` through `open` to its end and finishes it.
  absl::Status ReadFinished(const Opener& open, const std::string& url, std::string* data) {
    absl::StatusOr<std::unique_ptr<ByteStream>> s = open(url);
    if (!s.ok()) return s.status();
    absl::StatusOr<std::string> all = ReadAll(**s);
    if (!all.ok()) return all.status();
    *data = *all;
    return (*s)->Finish();
  }

  testing::TempDir dir_;
  std::string body_;
  std::string data_;
  std::string runs_;
};

TEST_F(PipeCacheTest, ACommandThatExitsZeroRunsOnceAndIsReadFromItsCopyAfter) {
  const std::string url = Command();
  Opener open = MakeOpener(options_);
  std::string data;
  ASSERT_TRUE(ReadFinished(open, url, &data).ok());
  EXPECT_EQ(Sha256(data), Sha256(body_));
  EXPECT_THAT(Names(options_.cache_dir), ElementsAre(Hash(url), Cat(Hash(url), ".meta")));
  EXPECT_EQ(Sha256(testing::ReadFile(CopyOf(url))), Sha256(body_));
  EXPECT_EQ(testing::ReadFile(CopyOf(url) + ".meta"), Cat("url ", url, "\netag \nsize 200000\n"));
  // Another opener (another process, say), and OpenAt from an offset, read the copy.
  ASSERT_TRUE(ReadFinished(MakeOpener(options_), url, &data).ok());
  EXPECT_EQ(Sha256(data), Sha256(body_));
  absl::StatusOr<std::unique_ptr<ByteStream>> at = RemoteOpener(options_).OpenAt(url, 199'990);
  ASSERT_TRUE(at.ok()) << at.status();
  EXPECT_EQ(*ReadAll(**at), body_.substr(199'990));
  EXPECT_EQ(Runs(), 1);
}

TEST_F(PipeCacheTest, WhatTheReaderLeftIsReadIntoTheCopyByFinish) {
  const std::string url = Command();
  absl::StatusOr<std::unique_ptr<ByteStream>> s = MakeOpener(options_)(url);
  ASSERT_TRUE(s.ok()) << s.status();
  char head[1000];
  ASSERT_EQ(*(*s)->Read(head, sizeof(head)), sizeof(head));  // a tar's reader stops early
  ASSERT_TRUE((*s)->Finish().ok());
  EXPECT_EQ(Sha256(testing::ReadFile(CopyOf(url))), Sha256(body_));
}

TEST_F(PipeCacheTest, NothingIsKeptOfAFailedCommandAPartialReadOrWithoutTheOption) {
  // The command fails after its output: the reader is told, nothing is kept.
  const std::string failing = Command("exit 3");
  std::string data;
  absl::Status failed = ReadFinished(MakeOpener(options_), failing, &data);
  EXPECT_EQ(failed.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Message(failed), HasSubstr("command failed with exit status 3"));
  EXPECT_EQ(data, body_);
  // Dropped before its end (no Finish): nothing is kept.
  const std::string url = Command();
  {
    absl::StatusOr<std::unique_ptr<ByteStream>> s = MakeOpener(options_)(url);
    ASSERT_TRUE(s.ok()) << s.status();
    char head[1000];
    ASSERT_EQ(*(*s)->Read(head, sizeof(head)), sizeof(head));
  }
  EXPECT_THAT(Names(options_.cache_dir), IsEmpty());
  // Without cache_pipes, and through the uncached opener, the command runs at every open.
  RemoteOptions off = options_;
  off.cache_pipes = false;
  ASSERT_TRUE(ReadFinished(MakeOpener(off), url, &data).ok());
  ASSERT_TRUE(ReadFinished(RemoteOpener(options_).AsUncachedOpener(), url, &data).ok());
  EXPECT_THAT(Names(options_.cache_dir), IsEmpty());
  EXPECT_EQ(Runs(), 4);
}

TEST_F(PipeCacheTest, AnEmptyOutputIsNeverKept) {
  // A command that prints nothing and exits 0 (curl -s on an error page):
  // its next open runs it again.
  const std::string url = Cat("pipe:echo run >> ", runs_);
  std::string data;
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(ReadFinished(MakeOpener(options_), url, &data).ok());
    EXPECT_EQ(data, "");
  }
  EXPECT_EQ(Runs(), 2);
  EXPECT_THAT(Names(options_.cache_dir), IsEmpty());
}

TEST_F(PipeCacheTest, AChildForkedDuringTheCopyDoesNotWriteIntoIt) {
  const std::string url = Command();
  const std::string part = CopyOf(url) + ".part";
  {
    absl::StatusOr<std::unique_ptr<ByteStream>> s = MakeOpener(options_)(url);
    ASSERT_TRUE(s.ok()) << s.status();
    char head[1000];
    ASSERT_EQ(*(*s)->Read(head, sizeof(head)), sizeof(head));
    const pid_t child = fork();
    if (child == 0) {
      // The child reads the inherited stream: what it reads is not the parent's copy's.
      std::vector<char> sink(20'000);
      const bool read = (*s)->Read(sink.data(), sink.size()).ok();
      _exit(read ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    EXPECT_EQ(fs::file_size(part), sizeof(head));
  }
  // Dropped before its end: nothing is kept.
  EXPECT_FALSE(fs::exists(part));
  EXPECT_FALSE(fs::exists(CopyOf(url)));
}

TEST_F(PipeCacheTest, OpenUrlCachesThemWhenTheEnvironmentSaysSo) {
  const std::string url = Command();
  testing::ScopedEnv dir("WDS_CACHE", options_.cache_dir.c_str());
  std::string data;
  ASSERT_TRUE(ReadFinished(OpenUrl, url, &data).ok());
  EXPECT_FALSE(fs::exists(CopyOf(url)));  // WDS_CACHE alone caches remote objects only
  testing::ScopedEnv on("WDS_CACHE_PIPES", "1");
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(ReadFinished(OpenUrl, url, &data).ok());
    EXPECT_EQ(Sha256(data), Sha256(body_));
  }
  EXPECT_EQ(Runs(), 2);
  EXPECT_EQ(Sha256(testing::ReadFile(CopyOf(url))), Sha256(body_));
}

TEST_F(PipeCacheTest, TheEnvironmentTurnsItOn) {
  testing::ScopedEnv on("WDS_CACHE_PIPES", "1");
  EXPECT_TRUE(RemoteOptions::FromEnvironment().cache_pipes);
  testing::ScopedEnv bad("WDS_CACHE_PIPES", "maybe");
  EXPECT_EQ(Message(RemoteOptions::ParseFromEnvironment().status()),
            "WDS_CACHE_PIPES='maybe' is not a boolean (1 or 0)");
}

// --- What is kept beside the copies (a remote shard's index): RemoteOpener::Keep

// KeptName is the file that holds what is kept for `url` under `what`.
std::string KeptName(const std::string& url, const std::string& what) {
  return Hash(Cat(what, " of ", url));
}

TEST_F(ShardCacheTest, WhatIsKeptIsReadBackForItsVersionAlone) {
  const RemoteOpener remote(options_);
  const ObjectVersion v1{"\"v1\"", "Tue, 15 Nov 1994 12:45:26 GMT", 300'000};
  remote.Keep(url(0), "index", v1, "the index\nof 0\n");
  EXPECT_EQ(remote.Kept(url(0), "index", v1), "the index\nof 0\n");
  // Another ETag, time or size, another name, another URL: nothing.
  for (const ObjectVersion& other :
       {ObjectVersion{"\"v2\"", v1.last_modified, v1.size}, ObjectVersion{v1.etag, "", v1.size},
        ObjectVersion{v1.etag, v1.last_modified, 299'999}}) {
    EXPECT_EQ(remote.Kept(url(0), "index", other), std::nullopt) << other.etag;
  }
  EXPECT_EQ(remote.Kept(url(0), "other", v1), std::nullopt);
  EXPECT_EQ(remote.Kept(url(1), "index", v1), std::nullopt);
  // One file (its first line the version) with its .meta, counted as a copy is.
  const std::string name = KeptName(url(0), "index");
  const std::string kept =
      "etag \"v1\" modified Tue, 15 Nov 1994 12:45:26 GMT size 300000\nthe index\nof 0\n";
  EXPECT_THAT(Names(options_.cache_dir), ElementsAre(name, name + ".meta"));
  EXPECT_EQ(testing::ReadFile(Cat(options_.cache_dir, "/", name)), kept);
  EXPECT_EQ(testing::ReadFile(Cat(options_.cache_dir, "/", name, ".meta")),
            Cat("url index of ", url(0), "\netag ", kept.substr(0, kept.find('\n')), "\nsize ",
                kept.size(), "\n"));
  EXPECT_EQ(Ledger(), Cat("bytes ", kept.size(), "\nscanned ", Scanned(), "\n"));
  // Another version replaces it, and the count.
  const ObjectVersion v2{"\"v2\"", v1.last_modified, 300'000};
  remote.Keep(url(0), "index", v2, "2");
  EXPECT_EQ(remote.Kept(url(0), "index", v1), std::nullopt);
  EXPECT_EQ(remote.Kept(url(0), "index", v2), "2");
  const std::string kept2 = "etag \"v2\" modified Tue, 15 Nov 1994 12:45:26 GMT size 300000\n2";
  EXPECT_EQ(testing::ReadFile(Cat(options_.cache_dir, "/", name)), kept2);
  EXPECT_EQ(Ledger(), Cat("bytes ", kept2.size(), "\nscanned ", Scanned(), "\n"));
  // Another process (another opener of the directory) reads it.
  EXPECT_EQ(RemoteOpener(options_).Kept(url(0), "index", v2), "2");
  EXPECT_EQ(server_.requests(), 0);
}

TEST_F(ShardCacheTest, NothingIsKeptWithoutACacheOrAVersionThatTellsItFromAnother) {
  const ObjectVersion v1{"\"v1\"", "", 300'000};
  RemoteOptions uncached = options_;
  uncached.cache_dir.clear();
  const RemoteOpener none(uncached);
  none.Keep(url(0), "index", v1, "x");
  EXPECT_EQ(none.Kept(url(0), "index", v1), std::nullopt);
  EXPECT_FALSE(fs::exists(options_.cache_dir));
  const RemoteOpener remote(options_);
  for (const ObjectVersion& blind :
       {ObjectVersion{"", "", 300'000}, ObjectVersion{"\"v1\"", "", -1},
        ObjectVersion{"\"v1\nx\"", "", 1}}) {
    remote.Keep(url(0), "index", blind, "x");
    EXPECT_EQ(remote.Kept(url(0), "index", blind), std::nullopt) << blind.etag;
  }
  EXPECT_FALSE(fs::exists(Cat(options_.cache_dir, "/", KeptName(url(0), "index"))));
  // Last-Modified alone, with the size, tells versions apart.
  const ObjectVersion dated{"", "Tue, 15 Nov 1994 12:45:26 GMT", 3};
  remote.Keep(url(0), "index", dated, "abc");
  EXPECT_EQ(remote.Kept(url(0), "index", dated), "abc");
}

TEST_F(ShardCacheTest, AKeepWhileAnotherProcessWritesItKeepsNothingAndLeavesTheirs) {
  const RemoteOpener remote(options_);
  const ObjectVersion v1{"\"v1\"", "", 300'000};
  ASSERT_TRUE(MakeDirectories(options_.cache_dir).ok());
  const std::string part = Cat(options_.cache_dir, "/", KeptName(url(0), "index"), ".part");
  const int fd = open(part.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, "theirs", 6), 6);
  ASSERT_EQ(flock(fd, LOCK_EX), 0);
  remote.Keep(url(0), "index", v1, "ours");
  EXPECT_EQ(remote.Kept(url(0), "index", v1), std::nullopt);
  EXPECT_EQ(testing::ReadFile(part), "theirs");
  close(fd);
  // Their lock gone, the next Keep takes the .part over.
  remote.Keep(url(0), "index", v1, "ours");
  EXPECT_EQ(remote.Kept(url(0), "index", v1), "ours");
  EXPECT_FALSE(fs::exists(part));
}

TEST_F(ShardCacheTest, KeptFilesAreEvictedWithTheCopiesLeastRecentlyUsedFirst) {
  options_.cache_size = 700'000;  // two of the three objects
  const RemoteOpener remote(options_);
  const ObjectVersion v1{"\"v1\"", "", 300'000};
  remote.Keep(url(1), "index", v1, std::string(300'000, 'i'));
  Opener open = remote.AsOpener();
  ExpectFetch(0, open);
  const std::string kept = Cat(options_.cache_dir, "/", KeptName(url(1), "index"));
  fs::last_write_time(kept, fs::last_write_time(kept) - std::chrono::seconds(20));
  Age(0, 10);
  // A read of what is kept makes it the most recently used.
  EXPECT_EQ(remote.Kept(url(1), "index", v1), std::string(300'000, 'i'));
  ExpectFetch(2, open);
  EXPECT_FALSE(fs::exists(cached(0)));
  EXPECT_FALSE(fs::exists(cached(0) + ".meta"));
  EXPECT_TRUE(fs::exists(kept));
  // Unused the longest, it goes next.
  fs::last_write_time(kept, fs::last_write_time(kept) - std::chrono::seconds(60));
  ExpectFetch(0, open);
  EXPECT_FALSE(fs::exists(kept));
  EXPECT_FALSE(fs::exists(kept + ".meta"));
  EXPECT_EQ(remote.Kept(url(1), "index", v1), std::nullopt);
}

TEST_F(ShardCacheTest, ForgetRemovesWhatWasKeptAndItsCount) {
  const RemoteOpener remote(options_);
  const ObjectVersion v1{"\"v1\"", "", 300'000};
  ExpectFetch(0, remote.AsOpener());
  remote.Keep(url(0), "index", v1, "abc");
  remote.Forget(url(0), "index");
  EXPECT_EQ(remote.Kept(url(0), "index", v1), std::nullopt);
  EXPECT_THAT(Names(options_.cache_dir), ElementsAre(Hash(url(0)), Hash(url(0)) + ".meta"));
  EXPECT_EQ(Ledger(), Cat("bytes 300000\nscanned ", Scanned(), "\n"));
  // Forgetting what is not kept, or without a cache, changes nothing.
  remote.Forget(url(1), "index");
  RemoteOptions uncached = options_;
  uncached.cache_dir.clear();
  RemoteOpener(uncached).Forget(url(0), "index");
  EXPECT_THAT(Names(options_.cache_dir), ElementsAre(Hash(url(0)), Hash(url(0)) + ".meta"));
  EXPECT_EQ(Ledger(), Cat("bytes 300000\nscanned ", Scanned(), "\n"));
}

// wds-shard index over remote shards scans 16 at a time: each request waits
// (up to 20 s, so that serial scans fail rather than hang) until eight are
// under way at once.
TEST(WdsShardIndexRemoteTest, RemoteShardsAreScannedConcurrentlyAndListedInOrder) {
  FaultServer server;
  testing::TempDir local;
  std::vector<std::string> urls;
  for (int i = 0; i < 8; ++i) {
    std::vector<testing::TarEntry> entries;
    for (int j = 0; j <= i; ++j) entries.push_back({Cat("k", j, ".cls"), std::to_string(j)});
    const std::string tar = testing::MakeTar(entries);
    server.Put(Cat("/d/s", i, ".tar"), tar);
    local.Write(Cat("s", i, ".tar"), tar);
    urls.push_back(server.Url(Cat("/d/s", i, ".tar")));
  }
  auto mu = std::make_shared<std::mutex>();
  auto cv = std::make_shared<std::condition_variable>();
  auto waiting = std::make_shared<int>(0);
  auto most = std::make_shared<int>(0);
  auto released = std::make_shared<bool>(false);  // a serial run waits once, not per shard
  server.SetPlanner([=](const FaultRequest&) {
    std::unique_lock<std::mutex> lock(*mu);
    *most = std::max(*most, ++*waiting);
    cv->notify_all();
    cv->wait_for(lock, std::chrono::seconds(20), [&] { return *most >= 8 || *released; });
    *released = true;
    --*waiting;
    return FaultPlan();
  });
  testing::TempDir work;
  std::string command = Cat(testing::ToolPath("wds-shard"), " index --dir idx --json all.json");
  for (int i : {7, 0, 1, 2, 3, 4, 5, 6}) command += " " + urls[i];
  const testing::ToolRun run = testing::RunCaptured(work.path(), command);
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(*most, 8);
  EXPECT_EQ(server.requests(), 8);
  ASSERT_EQ(testing::RunWdsShard(local, "index s{0..7}.tar").status, 0);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(testing::ReadFile(Cat(work.path(), "/idx/s", i, ".tar.idx")),
              testing::ReadFile(Cat(local.path(), "/s", i, ".tar.idx")))
        << i;
  }
  absl::StatusOr<DatasetIndex> index = DatasetIndex::Load(work.path() + "/all.json");
  ASSERT_TRUE(index.ok()) << index.status();
  ASSERT_EQ(index->shards.size(), 8u);
  EXPECT_EQ(index->shards[0].url, urls[7]);
  EXPECT_EQ(index->shards[0].nsamples, 8);
  EXPECT_EQ(index->shards[1].url, urls[0]);
  EXPECT_EQ(index->shards[1].nsamples, 1);
}

}  // namespace
}  // namespace wds
