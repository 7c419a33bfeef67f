// One core's device memory as the caching segment allocator lays it out
// (AllocatorPools.cpp): segments taken from the core's HBM, blocks placed in
// them, freed blocks kept for reuse. It decides addresses and sizes only; the
// bytes behind a tensor are host memory (HostPool.cpp).
#pragma once

#include "runtime/AllocatorHistory.h"
#include "runtime/AllocatorSizes.h"

#include <c10/core/CachingDeviceAllocator.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <atomic>
#include <map>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

namespace torch_neuronx {

// configure_devices' bound on logical cores.
constexpr int kMaxCores = 128;
// The most HBM bytes one core can have.
constexpr int64_t kMaxCoreBytes = (int64_t{1} << 40) - 1;

// A core's lock. Every op result takes it twice (allocation and free) for a
// few dozen instructions of work, so it is a spin lock: one atomic exchange to
// take, one store to give back, where a mutex costs two library calls; a
// waiter yields its CPU after a few tries (the holder may be descheduled).
class CoreLock {
 public:
  void lock() {
    while (C10_UNLIKELY(taken_.exchange(true, std::memory_order_acquire))) {
      wait();
    }
  }
  void unlock() {
    taken_.store(false, std::memory_order_release);
  }
  // In a forked child: the thread that held it does not exist there.
  void reset() {
    taken_.store(false, std::memory_order_relaxed);
  }

 private:
  C10_NOINLINE void wait() {
    for (int tries = 0; taken_.load(std::memory_order_relaxed); ++tries) {
      if (tries >= 64) {
        std::this_thread::yield();
      }
    }
  }
  std::atomic<bool> taken_{false};
};

// A part of a segment: given to one tensor, or free (cached for reuse).
struct Block {
  uint64_t address = 0;
  size_t size = 0;
  size_t requested = 0; // the bytes asked for, while allocated
  bool allocated = false;
  bool small = false; // pool
  bool quick = false; // free in a quick list: not merged with its neighbours yet
  Block* prev = nullptr; // neighbours in the segment, by address
  Block* next = nullptr;
  Block* bin_prev = nullptr; // the free list of its size, while free
  Block* bin_next = nullptr;
  Context context; // the allocation's stack, when the history keeps it
};

// Free blocks of one pool by size: a list per size class and a bitmap of
// the non-empty ones, so finding a block that fits is constant time.
class FreeBins {
 public:
  static constexpr int kBins = 224;
  void insert(Block* block);
  void remove(Block* block);
  // A free block of at least `bytes`, or null (not removed).
  Block* find(size_t bytes) const;

 private:
  std::array<Block*, kBins> heads_{};
  std::array<uint64_t, kBins / 64 + 1> nonempty_{};
};

// One core's emulated device addresses: segments are placed first fit, and
// a released segment's addresses are reused.
class AddressRanges {
 public:
  AddressRanges(uint64_t start, uint64_t bytes);
  uint64_t take(size_t bytes);
  void give_back(uint64_t address, size_t bytes);

 private:
  std::map<uint64_t, uint64_t> free_; // start -> bytes
};

// What a snapshot shows of a segment (AllocatorSnapshot.cpp).
struct SegmentView {
  uint64_t address = 0;
  size_t size = 0;
  bool small = false;
  std::vector<Block> blocks; // copies, neighbour links cleared
};

class CorePools {
 public:
  using DeviceStats = c10::CachingDeviceAllocator::DeviceStats;

  explicit CorePools(int index);
  ~CorePools();
  CorePools(const CorePools&) = delete;
  CorePools& operator=(const CorePools&) = delete;

  int index() const {
    return index_;
  }
  CoreLock& mutex() {
    return lock_;
  }

  // The rest is used under mutex().

  // A block for `requested` bytes (> 0), opening a segment within `capacity`
  // reserved bytes if no cached block holds it (after releasing the unused
  // segments once); null if it cannot fit.
  Block* allocate(size_t requested, int64_t capacity, Context&& context);
  void free(Block* block, Context&& context);
  // Returns every segment no tensor uses to the core's HBM; their count.
  int release_unused_segments();
  int64_t reserved_bytes() const {
    return stats_.reserved_bytes[0].current;
  }
  int64_t allocated_bytes() const {
    return stats_.allocated_bytes[0].current;
  }
  DeviceStats stats() const;
  void count_oom() {
    ++stats_.num_ooms;
  }
  void reset_peaks();
  void reset_accumulated();
  std::vector<SegmentView> segments() const;
  TraceLog& trace() {
    return trace_;
  }
  // In a forked child: a fresh lock, and peaks and counts of its own.
  void after_fork();

 private:
  struct Segment {
    Block* head; // the block at the segment's address; lives as long as it
    size_t size;
  };

  // Freed small blocks kept whole, per size class (kQuickDepth each, most
  // recently freed first), for the next request of their class.
  struct QuickList {
    Block* head = nullptr;
    int count = 0;
  };
  static constexpr int kQuickClasses = 48; // the bins of small-pool blocks
  static constexpr int kQuickDepth = 16;

  Block* take_quick(size_t bytes);
  bool keep_quick(Block* block);
  void merge_quick();
  Block* take_free(bool small, size_t bytes, size_t requested, int64_t capacity);
  void merge_and_cache(Block* block);
  void absorb(Block* lower, Block* upper);
  Block* open_segment(size_t requested, int64_t capacity);
  void close_segment(Block* head);
  Block* split(Block* block, size_t bytes);
  void cache(Block* block);
  void uncache(Block* block);
  Block* new_block();
  void recycle(Block* block);

  const int index_;
  CoreLock lock_;
  FreeBins small_bins_;
  FreeBins large_bins_;
  std::array<QuickList, kQuickClasses> quick_{};
  int64_t quick_blocks_ = 0;
  int64_t quick_bytes_ = 0;
  std::map<uint64_t, Segment> segments_;
  AddressRanges addresses_;
  std::vector<Block*> spare_blocks_;
  DeviceStats stats_;
  TraceLog trace_;
};

// Every core's pools, made on first use (make_core_pools), never freed.
extern std::array<std::atomic<CorePools*>, kMaxCores> g_core_pools;
CorePools& make_core_pools(int index);

// The pools of core `index` (< kMaxCores): on every allocation and free.
inline CorePools& core_pools(int index) {
  CorePools* core = g_core_pools[index].load(std::memory_order_acquire);
  return C10_LIKELY(core != nullptr) ? *core : make_core_pools(index);
}
// Every core's pools made so far (snapshots and the history visit these).
std::vector<CorePools*> existing_core_pools();

// The (allocated, reserved) bytes of a fresh core, of unbounded HBM, after
// `requests` (each > 0) are allocated in order and none is freed: what the
// long-lived tensors of a memory plan take (plan/rank_tensors.py).
std::pair<int64_t, int64_t> layout_bytes(const std::vector<size_t>& requests);

} // namespace torch_neuronx
