// wds-shard ls: list every sample of shards.
//
// Without --json one readable line per sample (url, key, then field:size
// pairs); with --json one JSON object per line,
//   {"__key__": "<key>", "__url__": "<url>", "<field>": {"size": N, "crc32": C}, ...}
// fields in tar order, crc32 as zlib computes it. URLs may be brace patterns
// or "::" lists. Under the default handler (reraise) any error exits with
// status 1 and a message naming the URL; other handlers report and go on.
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "commands.h"
#include "common.h"
#include "json_text.h"
#include "wds/wds.h"

namespace wds::tools {
namespace {

// Text is a status's code and message: its payloads (error kinds) are for
// programs, not for the terminal.
std::string Text(const absl::Status& status) {
  return status.ToString(absl::StatusToStringMode::kWithNoExtraData);
}

struct LsOptions {
  bool json = false;
  wds::Handler handler = wds::Handler::kReraise;
  std::vector<std::string> urls;
};

uint32_t Crc32(const wds::Buffer& b) {
  uLong crc = crc32(0L, Z_NULL, 0);
  // zlib takes uInt lengths: feed large members in chunks.
  for (size_t done = 0; done < b.size();) {
    uInt n = static_cast<uInt>(std::min<size_t>(b.size() - done, 1u << 30));
    crc = crc32(crc, b.data() + done, n);
    done += n;
  }
  return static_cast<uint32_t>(crc);
}

void AppendJsonLine(std::string& out, const wds::Sample& sample) {
  out.append("{\"__key__\": ");
  AppendJsonString(out, sample.key());
  out.append(", \"__url__\": ");
  AppendJsonString(out, sample.url());
  for (const auto& [name, value] : sample) {
    const wds::Buffer* bytes = std::get_if<wds::Buffer>(&value);
    if (bytes == nullptr) continue;  // __key__ and __url__
    out.append(", ");
    AppendJsonString(out, name);
    out.append(": {\"size\": ").append(std::to_string(bytes->size()));
    out.append(", \"crc32\": ").append(std::to_string(Crc32(*bytes))).append("}");
  }
  out.append("}\n");
}

void AppendTextLine(std::string& out, const wds::Sample& sample) {
  out.append(sample.url()).append("\t").append(sample.key());
  char sep = '\t';
  for (const auto& [name, value] : sample) {
    const wds::Buffer* bytes = std::get_if<wds::Buffer>(&value);
    if (bytes == nullptr) continue;
    out.push_back(sep);
    out.append(name).append(":").append(std::to_string(bytes->size()));
    sep = ' ';
  }
  out.push_back('\n');
}

bool ParseLs(int argc, char** argv, LsOptions* options, std::string* error) {
  for (int i = 0; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--json") {
      options->json = true;
    } else if (arg == "--handler") {
      if (++i == argc) return *error = "ls: --handler needs a value", false;
      absl::StatusOr<wds::Handler> h = wds::ParseHandler(argv[i]);
      if (!h.ok()) return *error = "ls: " + Text(h.status()), false;
      options->handler = *h;
    } else if (arg.size() > 1 && arg[0] == '-' && arg != "-") {
      return *error = "ls: unknown option " + std::string(arg), false;
    } else {
      absl::StatusOr<std::vector<std::string>> expanded = wds::ExpandUrls(arg);
      if (!expanded.ok()) return *error = "ls: " + Text(expanded.status()), false;
      options->urls.insert(options->urls.end(), expanded->begin(), expanded->end());
    }
  }
  if (options->urls.empty()) return *error = "ls: no shard URL given", false;
  return true;
}

}  // namespace

int RunLs(int argc, char** argv) {
  LsOptions options;
  std::string error;
  if (!ParseLs(argc, argv, &options, &error)) return Fail(error);
  wds::WebDatasetOptions wds_options;
  wds_options.handler = options.handler;
  wds_options.nodesplitter = nullptr;
  wds_options.workersplitter = nullptr;
  absl::StatusOr<wds::Pipeline> pipeline = wds::WebDataset(options.urls, wds_options);
  if (!pipeline.ok()) return Fail(Text(pipeline.status()));
  wds::WorkerContext ctx;
  ctx.errors = std::make_shared<wds::ErrorCounters>();
  std::unique_ptr<wds::SampleStream> stream = pipeline->Open(ctx);
  std::string out;
  while (true) {
    wds::SampleResult item = stream->Next();
    if (!item.ok()) {
      std::fwrite(out.data(), 1, out.size(), stdout);
      std::fflush(stdout);
      return Fail(Text(item.status()));
    }
    if (!item->has_value()) break;
    options.json ? AppendJsonLine(out, **item) : AppendTextLine(out, **item);
    if (out.size() > (1 << 16)) {
      std::fwrite(out.data(), 1, out.size(), stdout);
      out.clear();
    }
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  if (int64_t n = ctx.errors->Total(); n > 0) {
    std::fprintf(stderr, "wds-shard: ls: %lld error(s) handled by %s\n", static_cast<long long>(n),
                 std::string(HandlerName(options.handler)).c_str());
  }
  return std::fflush(stdout) == 0 ? 0 : Fail("ls: cannot write output");
}

}  // namespace wds::tools
