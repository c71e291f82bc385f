// AlignedHostAllocator and the choice between it and pinned memory.
#include <cstdlib>
#include <memory>
#include <string>

#include "wds/buffer_pool.h"
#include "wds/internal/strings.h"

namespace wds {
namespace {

// kPageSize aligns batch storage to pages: DMA engines and huge pages like it,
// and the pool's size classes are page multiples, so nothing is wasted.
constexpr size_t kPageSize = 4096;

class AlignedAllocator final : public HostAllocator {
 public:
  absl::StatusOr<void*> Allocate(size_t bytes) override {
    void* p = nullptr;
    if (posix_memalign(&p, kPageSize, bytes == 0 ? 1 : bytes) != 0) {
      return absl::ResourceExhaustedError(Cat("cannot allocate ", bytes, " bytes of host memory"));
    }
    return p;
  }
  void Deallocate(void* p, size_t /*bytes*/) override { std::free(p); }
  bool pinned() const override { return false; }
  std::string_view name() const override { return "aligned"; }
};

}  // namespace

std::shared_ptr<HostAllocator> AlignedHostAllocator() {
  return std::make_shared<AlignedAllocator>();
}

BatchAllocator DefaultBatchAllocator(bool pin_memory, int device) {
  if (!pin_memory) return {AlignedHostAllocator(), ""};
  absl::StatusOr<std::shared_ptr<HostAllocator>> pinned = PinnedHostAllocator(device);
  if (pinned.ok()) return {*std::move(pinned), ""};
  return {AlignedHostAllocator(),
          Cat("pin_memory was requested but pinned memory is unavailable (",
              ToStd(pinned.status().message()), "); batches use ordinary aligned host memory")};
}

}  // namespace wds
