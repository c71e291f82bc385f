// StagingPool.
#include "gpu/staging.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "wds/internal/base/strings.h"

namespace wds::gpu {

struct StagingBuffer::Shared {
  std::shared_ptr<HostAllocator> allocator;
  int max_buffers = 1;
  mutable absl::Mutex mu;
  std::vector<std::pair<uint8_t*, size_t>> idle ABSL_GUARDED_BY(mu);
  int leased ABSL_GUARDED_BY(mu) = 0;
  size_t reserved ABSL_GUARDED_BY(mu) = 0;
  int64_t allocations ABSL_GUARDED_BY(mu) = 0;

  ~Shared() {
    for (auto [p, size] : idle) allocator->Deallocate(p, size);
  }
};

StagingBuffer::StagingBuffer(StagingBuffer&& other) noexcept
    : pool_(std::move(other.pool_)),
      data_(std::exchange(other.data_, nullptr)),
      capacity_(std::exchange(other.capacity_, 0)) {}

StagingBuffer& StagingBuffer::operator=(StagingBuffer&& other) noexcept {
  if (this != &other) {
    Release();
    pool_ = std::move(other.pool_);
    data_ = std::exchange(other.data_, nullptr);
    capacity_ = std::exchange(other.capacity_, 0);
  }
  return *this;
}

StagingBuffer::~StagingBuffer() { Release(); }

void StagingBuffer::Release() {
  if (pool_ == nullptr) return;
  {
    absl::MutexLock lock(&pool_->mu);
    pool_->idle.emplace_back(data_, capacity_);
    --pool_->leased;
  }
  pool_.reset();
  data_ = nullptr;
  capacity_ = 0;
}

StagingPool::StagingPool(std::shared_ptr<HostAllocator> allocator, int max_buffers)
    : shared_(std::make_shared<StagingBuffer::Shared>()) {
  shared_->allocator = std::move(allocator);
  shared_->max_buffers = std::max(1, max_buffers);
}

absl::StatusOr<StagingBuffer> StagingPool::Acquire(size_t bytes) {
  StagingBuffer::Shared& s = *shared_;
  const size_t size = PooledSize(bytes, kStagingGranule);
  absl::MutexLock lock(&s.mu);
  // The smallest idle buffer that fits; idle buffers are few (max_buffers).
  auto best = s.idle.end();
  for (auto it = s.idle.begin(); it != s.idle.end(); ++it) {
    if (it->second >= bytes && (best == s.idle.end() || it->second < best->second)) best = it;
  }
  if (best != s.idle.end()) {
    const auto [p, capacity] = *best;
    s.idle.erase(best);
    ++s.leased;
    return StagingBuffer(shared_, p, capacity);
  }
  const int existing = s.leased + static_cast<int>(s.idle.size());
  if (existing >= s.max_buffers) {
    if (s.idle.empty()) {
      return absl::ResourceExhaustedError(Cat("staging pool: all ", s.max_buffers,
                                              " buffers are in use (", bytes, " bytes asked)"));
    }
    auto largest = std::max_element(s.idle.begin(), s.idle.end(),
                                    [](auto& a, auto& b) { return a.second < b.second; });
    s.allocator->Deallocate(largest->first, largest->second);
    s.reserved -= largest->second;
    s.idle.erase(largest);
  }
  ++s.allocations;
  absl::StatusOr<void*> p = s.allocator->Allocate(size);
  if (!p.ok()) return p.status();
  s.reserved += size;
  ++s.leased;
  return StagingBuffer(shared_, static_cast<uint8_t*>(*p), size);
}

bool StagingPool::pinned() const { return shared_->allocator->pinned(); }

int StagingPool::leased() const {
  absl::MutexLock lock(&shared_->mu);
  return shared_->leased;
}

int StagingPool::buffers() const {
  absl::MutexLock lock(&shared_->mu);
  return shared_->leased + static_cast<int>(shared_->idle.size());
}

size_t StagingPool::reserved_bytes() const {
  absl::MutexLock lock(&shared_->mu);
  return shared_->reserved;
}

int64_t StagingPool::allocations() const {
  absl::MutexLock lock(&shared_->mu);
  return shared_->allocations;
}

}  // namespace wds::gpu
