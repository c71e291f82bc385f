// Writes a shard with the installed library and reads it back through a Loader.
#include <wds/wds.h>

#include <cstdio>
#include <string>

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  std::string shard = std::string(argv[1]) + "/shard-000000.tar";
  auto writer = wds::TarWriter::Create(shard);
  if (!writer.ok()) return 3;
  for (int i = 0; i < 10; ++i) {
    wds::Sample s;
    s.Set("__key__", "sample" + std::to_string(i));
    s.Set("cls", int64_t{i});
    if (!(*writer)->Write(s).ok()) return 4;
  }
  if (!(*writer)->Close().ok()) return 5;
  auto pipeline = wds::WebDataset(std::string(argv[1]) + "/shard-{000000..000000}.tar");
  if (!pipeline.ok()) return 6;
  wds::Loader loader(pipeline->Decode(), {.workers = 1});
  int64_t sum = 0, n = 0;
  for (const wds::Sample& s : loader) {
    sum += *s.GetInt("cls");
    ++n;
  }
  std::printf("downstream: %lld samples, label sum %lld\n", static_cast<long long>(n),
              static_cast<long long>(sum));
  return (n == 10 && sum == 45) ? 0 : 1;
}
