// A caching pool for the host memory behind neuron tensors.
//
// Device memory is host memory, and most of it is allocated by the CPU
// kernels that run neuron ops (their results are adopted, see aten/native/Call.h).
// Left to glibc, large blocks freed at the end of every step are handed back
// to the kernel (mmap threshold, heap trimming) and faulted in again on the
// next step: a neuron training process took twice the page faults of the CPU
// one and ran ~1.2x slower for it. A device allocator keeps freed memory for
// reuse instead, as CUDA's caching allocator and the Neuron runtime do.
//
// While a neuron op runs its CPU kernel (HostPoolScope, set by the fallback
// and the fast path), the process's CPU allocator serves its requests from
// here; every other CPU allocation goes to PyTorch's default allocator
// unchanged. The device allocator takes its blocks from here too. Two tiers:
//
// - Large blocks (>= 256 KiB) are kept per rounded size in one process-wide
//   pool up to a byte limit (TORCHNEURON_HOST_POOL_MB).
// - Small blocks (1 KiB to 256 KiB, e.g. a 64x64 result) are kept per size
//   class in a cache of each thread: glibc serves these sizes from its
//   unsorted bins (no tcache above 1 KiB), about 1,300 instructions for a
//   malloc and free, a tenth of a small op; a thread's cache gives back the
//   block it freed last, without a lock.
//
// torch.neuron.empty_cache() returns the pool's blocks, and the calling
// thread's, to the system; TORCHNEURON_HOST_POOL_MB=0 keeps none. This is
// host-side caching only: the emulated HBM accounting (allocated ==
// reserved) does not change.
#include "runtime/HostPool.h"
#include "runtime/Fork.h"
#include "runtime/PerThread.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

#include <array>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <unordered_set>
#include <vector>

namespace torch_neuronx {
namespace {

// Below this, glibc serves requests from its heap without returning them to
// the system; pooling would only add a lock.
constexpr size_t kMinPooledBytes = 256 * 1024;
constexpr size_t kRounding = 64 * 1024;
// Bookkeeping in front of each pooled block; keeps the 64-byte alignment
// PyTorch's CPU allocator guarantees.
constexpr size_t kHeader = 64;

struct BlockHeader {
  size_t size; // rounded payload bytes
};

class HostPool {
 public:
  void* allocate(size_t nbytes) {
    const size_t size = round(nbytes);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = free_.find(size);
      if (it != free_.end() && !it->second.empty()) {
        void* payload = it->second.back();
        it->second.pop_back();
        cached_bytes_ -= size;
        ++hits_;
        live_.insert(payload);
        return payload;
      }
      ++misses_;
    }
    auto* base = static_cast<char*>(c10::alloc_cpu(size + kHeader));
    reinterpret_cast<BlockHeader*>(base)->size = size;
    void* payload = base + kHeader;
    std::lock_guard<std::mutex> lock(mutex_);
    live_.insert(payload);
    return payload;
  }

  // Whether `payload` is a block handed out by this pool and not yet released.
  bool owns(void* payload) {
    std::lock_guard<std::mutex> lock(mutex_);
    return live_.count(payload) > 0;
  }

  void release(void* payload) {
    const size_t size = header_of(payload)->size;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      live_.erase(payload);
      if (cached_bytes_ + size <= limit_) {
        free_[size].push_back(payload);
        cached_bytes_ += size;
        return;
      }
    }
    c10::free_cpu(header_of(payload));
  }

  // Returns every cached block to the system.
  void empty() {
    std::map<size_t, std::vector<void*>> blocks;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      blocks.swap(free_);
      cached_bytes_ = 0;
    }
    for (auto& [size, list] : blocks) {
      for (void* payload : list) {
        c10::free_cpu(header_of(payload));
      }
    }
  }

  void set_limit(size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      limit_ = bytes;
    }
    empty();
  }

  std::vector<int64_t> stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    return {static_cast<int64_t>(hits_), static_cast<int64_t>(misses_),
            static_cast<int64_t>(cached_bytes_), static_cast<int64_t>(limit_)};
  }

  // In a forked child (Fork.h): a fresh lock and this process's own hit and
  // miss counts. The cached blocks stay: fork copied them, they are the
  // child's memory now.
  void after_fork() {
    recreate_lock(mutex_);
    hits_ = 0;
    misses_ = 0;
  }

 private:
  static size_t round(size_t nbytes) {
    return (nbytes + kRounding - 1) / kRounding * kRounding;
  }
  static BlockHeader* header_of(void* payload) {
    return reinterpret_cast<BlockHeader*>(static_cast<char*>(payload) - kHeader);
  }

  std::mutex mutex_;
  std::map<size_t, std::vector<void*>> free_;
  std::unordered_set<void*> live_;
  size_t cached_bytes_ = 0;
  size_t limit_ = size_t{1} << 30;
  uint64_t hits_ = 0;
  uint64_t misses_ = 0;
};

// Never destroyed: tensors freed during static destruction still return here.
HostPool& pool() {
  static auto* instance = new HostPool();
  return *instance;
}

const bool g_fork_handler = on_fork_child([] { pool().after_fork(); });

// ---- small blocks: a cache per thread --------------------------------------

// At or below this glibc's per-thread cache (tcache) is as fast as ours.
constexpr size_t kMinCachedBytes = 1024;
// Four classes per doubling (sizes rounded up by at most a quarter): 32
// classes from 1 KiB to the pool's 256 KiB.
constexpr int kClassesPerDoubling = 4;
constexpr int kFirstShift = 10; // the first doubling: (1 KiB, 2 KiB]
constexpr int kClasses = 32;
static_assert(size_t{1} << (kFirstShift + kClasses / kClassesPerDoubling) == kMinPooledBytes);

// Ahead of each cached block, like the pool's: its class.
struct SmallHeader {
  int32_t size_class;
};
static_assert(sizeof(SmallHeader) <= kHeader);

SmallHeader* small_header_of(void* payload) {
  return reinterpret_cast<SmallHeader*>(static_cast<char*>(payload) - kHeader);
}

// Every small block that exists (made by small_allocate, not yet returned to
// the system), whichever thread's cache holds it or tensor uses it:
// raw_deallocate() has only a pointer, and this is how it tells our blocks
// from the default allocator's without reading memory in front of a pointer
// that may not be ours. Only blocks made or returned to the system touch it,
// never a block served from or kept in a thread's cache.
class SmallBlockRegistry {
 public:
  void add(void* payload) {
    std::lock_guard<std::mutex> lock(mutex_);
    live_.insert(payload);
  }
  void remove(void* payload) {
    std::lock_guard<std::mutex> lock(mutex_);
    live_.erase(payload);
  }
  bool contains(void* payload) {
    std::lock_guard<std::mutex> lock(mutex_);
    return live_.count(payload) > 0;
  }
  void after_fork() {
    recreate_lock(mutex_);
  }

 private:
  std::mutex mutex_;
  std::unordered_set<void*> live_;
};

// Never destroyed, like the pool.
SmallBlockRegistry& small_blocks() {
  static auto* instance = new SmallBlockRegistry();
  return *instance;
}

const bool g_small_fork_handler = on_fork_child([] { small_blocks().after_fork(); });

// Which tier serves a request of `nbytes`.
enum class Tier { kPooled, kSmall, kSystem };

Tier tier_of(size_t nbytes) {
  if (nbytes >= kMinPooledBytes) {
    return Tier::kPooled;
  }
  return nbytes > kMinCachedBytes ? Tier::kSmall : Tier::kSystem;
}

// The class of a size in (1 KiB, 256 KiB): doubling k (nbytes in
// (2^k, 2^(k+1)]), quarter q of it (1..4).
int class_of(size_t nbytes) {
  const int k = 63 - __builtin_clzll(nbytes - 1);
  const int quarter_shift = k - 2;
  const size_t q = (nbytes - (size_t{1} << k) + (size_t{1} << quarter_shift) - 1) >> quarter_shift;
  return (k - kFirstShift) * kClassesPerDoubling + static_cast<int>(q) - 1;
}

// The bytes of each class, a table: a cache hit and its free each need them.
constexpr std::array<size_t, kClasses> kClassBytes = [] {
  std::array<size_t, kClasses> bytes{};
  for (int c = 0; c < kClasses; ++c) {
    const int k = kFirstShift + c / kClassesPerDoubling;
    const size_t q = static_cast<size_t>(c % kClassesPerDoubling) + 1;
    bytes[c] = (size_t{1} << k) + (q << (k - 2));
  }
  return bytes;
}();
static_assert(kClassBytes[kClasses - 1] == kMinPooledBytes);

size_t class_bytes(int size_class) {
  return kClassBytes[size_class];
}

// Off when TORCHNEURON_HOST_POOL_MB is 0 (no host memory kept).
std::atomic<bool> g_small_cache_on{true};

class SmallBlocks {
 public:
  // Up to kDepth freed blocks per class, and kMaxBytes in all, per thread.
  static constexpr int kDepth = 16;
  static constexpr size_t kMaxBytes = size_t{8} << 20;

  ~SmallBlocks() {
    empty();
  }

  void* take(int size_class) {
    auto& stack = blocks_[size_class];
    if (counts_[size_class] == 0) {
      return nullptr;
    }
    bytes_ -= class_bytes(size_class);
    return stack[--counts_[size_class]];
  }

  // Whether the cache kept `payload` (of `size_class`).
  bool keep(void* payload, int size_class) {
    const size_t size = class_bytes(size_class);
    if (counts_[size_class] == kDepth || bytes_ + size > kMaxBytes) {
      return false;
    }
    blocks_[size_class][counts_[size_class]++] = payload;
    bytes_ += size;
    return true;
  }

  void empty();

  bool holds_any() const {
    return bytes_ > 0;
  }

 private:
  std::array<std::array<void*, kDepth>, kClasses> blocks_{};
  std::array<int, kClasses> counts_{};
  size_t bytes_ = 0;
};

// Back to the system: out of the registry first, so that a raw free of the
// same address, reused by glibc, is not taken for ours.
void free_small_block(void* payload) {
  small_blocks().remove(payload);
  c10::free_cpu(static_cast<char*>(payload) - kHeader);
}

void SmallBlocks::empty() {
  for (int c = 0; c < kClasses; ++c) {
    while (counts_[c] > 0) {
      free_small_block(blocks_[c][--counts_[c]]);
    }
  }
  bytes_ = 0;
}

// The calling thread's cache while caching is on. Once it is off
// (TORCHNEURON_HOST_POOL_MB=0), each thread's cache is emptied at the
// thread's next small allocation or free, so no thread keeps blocks.
C10_ALWAYS_INLINE SmallBlocks* small_cache() {
  SmallBlocks* cache = PerThread<SmallBlocks>::get();
  if (cache == nullptr || C10_LIKELY(g_small_cache_on.load(std::memory_order_relaxed))) {
    return cache;
  }
  if (cache->holds_any()) {
    cache->empty();
  }
  return nullptr;
}

void* small_allocate(size_t nbytes) {
  const int size_class = class_of(nbytes);
  SmallBlocks* cache = small_cache();
  if (cache != nullptr) {
    if (void* payload = cache->take(size_class)) {
      return payload;
    }
  }
  auto* base = static_cast<char*>(c10::alloc_cpu(class_bytes(size_class) + kHeader));
  void* payload = base + kHeader;
  *small_header_of(payload) = {size_class};
  small_blocks().add(payload);
  return payload;
}

void small_release(void* payload) {
  const int size_class = small_header_of(payload)->size_class;
  SmallBlocks* cache = small_cache();
  if (cache == nullptr || !cache->keep(payload, size_class)) {
    free_small_block(payload);
  }
}

void release_pooled(void* payload) {
  pool().release(payload);
}

// raw_deallocate() only has the pointer: ask the pool whose it is.
void release_raw(void* data) {
  if (pool().owns(data)) {
    pool().release(data);
  } else if (small_blocks().contains(data)) {
    small_release(data);
  } else {
    c10::free_cpu(data);
  }
}

thread_local int t_scope_depth TORCH_NEURONX_FAST_TLS = 0;

// The process's CPU allocator: the pool inside a HostPoolScope for large
// requests, PyTorch's default allocator for everything else. Data and context
// are the same pointer, so raw_allocate()/raw_deleter() users keep working.
class ScopedPoolAllocator final : public c10::Allocator {
 public:
  // `fallback` must free with c10::free_cpu (PyTorch's default does), as
  // release_raw assumes for blocks that are not the pool's.
  explicit ScopedPoolAllocator(c10::Allocator* fallback) : fallback_(fallback) {}

  c10::DataPtr allocate(size_t nbytes) override {
    if (t_scope_depth == 0) {
      return fallback_->allocate(nbytes);
    }
    switch (tier_of(nbytes)) {
      case Tier::kPooled: {
        void* payload = pool().allocate(nbytes);
        return {payload, payload, &release_pooled, c10::Device(c10::DeviceType::CPU)};
      }
      case Tier::kSmall: {
        void* payload = small_allocate(nbytes);
        return {payload, payload, &small_release, c10::Device(c10::DeviceType::CPU)};
      }
      case Tier::kSystem:
        break;
    }
    return fallback_->allocate(nbytes);
  }

  c10::DeleterFnPtr raw_deleter() const override {
    return &release_raw;
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }

 private:
  c10::Allocator* fallback_;
};

} // namespace

HostPoolScope::HostPoolScope() {
  ++t_scope_depth;
}

HostPoolScope::~HostPoolScope() {
  --t_scope_depth;
}

void install_host_pool(int64_t limit_bytes) {
  static auto* allocator = new ScopedPoolAllocator(c10::GetCPUAllocator());
  pool().set_limit(static_cast<size_t>(std::max<int64_t>(limit_bytes, 0)));
  g_small_cache_on.store(limit_bytes > 0, std::memory_order_relaxed);
  if (limit_bytes <= 0) {
    empty_host_pool();
  }
  c10::SetCPUAllocator(allocator, /*priority=*/1);
}

void* host_pool_allocate(size_t nbytes) {
  switch (tier_of(nbytes)) {
    case Tier::kPooled:
      return pool().allocate(nbytes);
    case Tier::kSmall:
      return small_allocate(nbytes);
    case Tier::kSystem:
      break;
  }
  return c10::alloc_cpu(nbytes);
}

void host_pool_free(void* data, size_t nbytes) {
  switch (tier_of(nbytes)) {
    case Tier::kPooled:
      pool().release(data);
      return;
    case Tier::kSmall:
      small_release(data);
      return;
    case Tier::kSystem:
      break;
  }
  c10::free_cpu(data);
}

void empty_host_pool() {
  pool().empty();
  if (SmallBlocks* cache = PerThread<SmallBlocks>::get()) {
    cache->empty();
  }
}

std::vector<int64_t> host_pool_stats() {
  return pool().stats();
}

} // namespace torch_neuronx
