// A caching pool for the host memory behind large neuron tensors.
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
// and the fast path), the process's CPU allocator serves large requests from
// this pool; every other CPU allocation goes to PyTorch's default allocator
// unchanged. The device allocator takes its large blocks from here too.
// Freed blocks are kept per rounded size up to a byte limit
// (TORCHNEURON_HOST_POOL_MB); torch.neuron.empty_cache() returns them to the
// system. This is host-side caching only: the emulated HBM accounting
// (allocated == reserved) does not change.
#include "runtime/HostPool.h"
#include "runtime/Fork.h"
#include "runtime/PerThread.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

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

  static bool pooled(size_t nbytes) {
    return nbytes >= kMinPooledBytes;
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

void release_pooled(void* payload) {
  pool().release(payload);
}

// raw_deallocate() only has the pointer: ask the pool whose it is.
void release_raw(void* data) {
  if (pool().owns(data)) {
    pool().release(data);
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
    if (t_scope_depth == 0 || !HostPool::pooled(nbytes)) {
      return fallback_->allocate(nbytes);
    }
    void* payload = pool().allocate(nbytes);
    return {payload, payload, &release_pooled, c10::Device(c10::DeviceType::CPU)};
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
  c10::SetCPUAllocator(allocator, /*priority=*/1);
}

void* host_pool_allocate(size_t nbytes) {
  return HostPool::pooled(nbytes) ? pool().allocate(nbytes) : c10::alloc_cpu(nbytes);
}

void host_pool_free(void* data, size_t nbytes) {
  if (HostPool::pooled(nbytes)) {
    pool().release(data);
  } else {
    c10::free_cpu(data);
  }
}

void empty_host_pool() {
  pool().empty();
}

std::vector<int64_t> host_pool_stats() {
  return pool().stats();
}

} // namespace torch_neuronx
