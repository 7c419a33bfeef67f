// Per-core memory statistics without a lock on the charge/release path.
//
// Every neuron allocation and every freed result updates its core's
// statistics, so they sit on the hot path of every eager op; a mutex there
// was a fifth of what a small op's result cost beyond CPU's. Two kinds of
// figure, kept two ways:
//
// - Live memory and its peaks (what torch.neuron.max_memory_allocated()
//   reports, an emulated count users see). Per core, and per pool of it, the
//   live bytes and blocks share one atomic word, so a charge or a release is
//   one atomic change, and the out-of-memory check is part of the change (a
//   compare-and-swap). The peaks are exact: the word's modification order is
//   the order in which a locked version would have applied the same changes;
//   the thread making each change sees the value it produced and raises the
//   peak to it (a loop that only ever raises), so the peak is the largest
//   value the word held since the last reset, as the locked version computes
//   for that order.
// - Cumulative counts (bytes and blocks allocated and freed, per pool): sums,
//   whose order does not matter. Each thread adds to a table of its own (no
//   read-modify-write, no shared cache line); a reader adds the tables up
//   under the registry's lock, and a reset records the sums it subtracts.
//
// A reader running while other threads allocate sees each figure at some
// moment of their progress, not all of them at one moment; once they stop,
// every figure is what the locked version reports.
#include "runtime/AllocatorStats.h"
#include "runtime/Fork.h"
#include "runtime/PerThread.h"

#include <c10/macros/Macros.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <mutex>
#include <vector>

namespace torch_neuronx {
namespace {

using c10::CachingAllocator::Stat;
using c10::CachingAllocator::StatArray;
using c10::CachingAllocator::StatType;

// The device allocator's small pool (the real allocator's 1 MiB split).
constexpr size_t kSmallBlockLimit = 1 << 20;
constexpr int kPools = 2; // small, large

int pool_of(size_t bytes) {
  return bytes < kSmallBlockLimit ? 0 : 1;
}

// Live bytes (low 40 bits) and live blocks (high 24 bits) of one pool, or of
// a whole core, with the peak of each.
class LiveMemory {
 public:
  static constexpr int kBlockShift = 40;
  static constexpr uint64_t kOneBlock = uint64_t{1} << kBlockShift;
  static constexpr uint64_t kMaxBlocks = (uint64_t{1} << (64 - kBlockShift)) - 1;

  // One block of `bytes` more if the bytes stay within `capacity`; false,
  // with nothing changed, if not (`live` then holds the live bytes).
  bool try_add(uint64_t bytes, uint64_t capacity, int64_t& live) {
    uint64_t word = word_.load(std::memory_order_relaxed);
    uint64_t next = 0;
    do {
      const uint64_t used = bytes_of(word);
      if (used > capacity || bytes > capacity - used) {
        live = static_cast<int64_t>(used);
        return false;
      }
      if (C10_UNLIKELY(blocks_of(word) >= kMaxBlocks)) {
        too_many_blocks();
      }
      next = word + bytes + kOneBlock;
    } while (!word_.compare_exchange_weak(word, next, std::memory_order_relaxed));
    raise_peaks(next);
    return true;
  }

  // For a pool of a core whose total was just charged (so neither field can
  // overflow: the pool holds at most the core's bytes and blocks).
  void add(uint64_t bytes) {
    raise_peaks(word_.fetch_add(bytes + kOneBlock, std::memory_order_relaxed) + bytes + kOneBlock);
  }

  void sub(uint64_t bytes) {
    word_.fetch_sub(bytes + kOneBlock, std::memory_order_relaxed);
  }

  int64_t bytes() const {
    return static_cast<int64_t>(bytes_of(word_.load(std::memory_order_relaxed)));
  }

  void fill(Stat& bytes_stat, Stat& blocks_stat) const {
    const uint64_t word = word_.load(std::memory_order_relaxed);
    bytes_stat.current = static_cast<int64_t>(bytes_of(word));
    blocks_stat.current = static_cast<int64_t>(blocks_of(word));
    bytes_stat.peak = peak_bytes_.load(std::memory_order_relaxed);
    blocks_stat.peak = peak_blocks_.load(std::memory_order_relaxed);
  }

  void reset_peaks() {
    const uint64_t word = word_.load(std::memory_order_relaxed);
    peak_bytes_.store(static_cast<int64_t>(bytes_of(word)), std::memory_order_relaxed);
    peak_blocks_.store(static_cast<int64_t>(blocks_of(word)), std::memory_order_relaxed);
  }

 private:
  // Out of line: the message's code kept the charge's fast path from being lean.
  [[noreturn]] C10_NOINLINE static void too_many_blocks() {
    TORCH_CHECK(false, "the neuron emulator counts at most ", kMaxBlocks,
                " live allocations per core; free some tensors");
  }
  static uint64_t bytes_of(uint64_t word) {
    return word & (kOneBlock - 1);
  }
  static uint64_t blocks_of(uint64_t word) {
    return word >> kBlockShift;
  }
  static void raise(std::atomic<int64_t>& peak, int64_t value) {
    int64_t seen = peak.load(std::memory_order_relaxed);
    while (value > seen &&
           !peak.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
    }
  }
  void raise_peaks(uint64_t word) {
    raise(peak_bytes_, static_cast<int64_t>(bytes_of(word)));
    raise(peak_blocks_, static_cast<int64_t>(blocks_of(word)));
  }

  std::atomic<uint64_t> word_{0};
  std::atomic<int64_t> peak_bytes_{0};
  std::atomic<int64_t> peak_blocks_{0};
};
static_assert(kMaxCoreBytes == static_cast<int64_t>(LiveMemory::kOneBlock - 1));

struct alignas(64) CoreCounters {
  LiveMemory all;
  std::array<LiveMemory, kPools> pools;
  std::atomic<int64_t> num_ooms{0};
};
CoreCounters g_cores[kMaxCores];

// ---- cumulative counts, one table per thread -------------------------------

enum Total { kAllocatedBytes, kAllocatedBlocks, kFreedBytes, kFreedBlocks, kTotals };
using PoolTotals = std::array<int64_t, kTotals>;

// Written only by its thread (or under g_threads_mutex), read under the lock:
// atomics for the reads, plain loads and stores for the writes.
struct Totals {
  std::array<std::array<std::array<std::atomic<int64_t>, kTotals>, kPools>, kMaxCores> cores{};

  void add(c10::DeviceIndex index, int pool, int64_t bytes, bool allocated) {
    auto& counts = cores[index][pool];
    bump(counts[allocated ? kAllocatedBytes : kFreedBytes], bytes);
    bump(counts[allocated ? kAllocatedBlocks : kFreedBlocks], 1);
  }
  static void bump(std::atomic<int64_t>& counter, int64_t n) {
    counter.store(counter.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
};

std::mutex g_threads_mutex;
// Live threads' tables; leaked, so that threads ending during static
// destruction still find them.
std::vector<Totals*>& g_threads = *new std::vector<Totals*>();
Totals g_retired; // finished threads' counts, under the lock
std::array<std::array<PoolTotals, kPools>, kMaxCores> g_baseline{}; // what a reset subtracts

// One thread's table (PerThread.h): registered when the thread first counts,
// folded into the retired counts when it ends.
struct ThreadTotals : Totals {
  ThreadTotals() {
    std::lock_guard<std::mutex> lock(g_threads_mutex);
    g_threads.push_back(this);
  }
  ~ThreadTotals() {
    std::lock_guard<std::mutex> lock(g_threads_mutex);
    for (int c = 0; c < kMaxCores; ++c) {
      for (int p = 0; p < kPools; ++p) {
        for (int k = 0; k < kTotals; ++k) {
          bump(g_retired.cores[c][p][k], cores[c][p][k].load(std::memory_order_relaxed));
        }
      }
    }
    g_threads.erase(std::find(g_threads.begin(), g_threads.end(), this));
  }
};

// A tensor freed by a thread's own teardown, after its table was folded.
C10_NOINLINE void count_retired(c10::DeviceIndex index, size_t bytes, bool allocated) {
  std::lock_guard<std::mutex> lock(g_threads_mutex);
  g_retired.add(index, pool_of(bytes), static_cast<int64_t>(bytes), allocated);
}

// Inline, its rare case out of line: on every charge and release.
C10_ALWAYS_INLINE void count(c10::DeviceIndex index, size_t bytes, bool allocated) {
  ThreadTotals* totals = PerThread<ThreadTotals>::get();
  if (C10_UNLIKELY(totals == nullptr)) {
    count_retired(index, bytes, allocated);
    return;
  }
  totals->add(index, pool_of(bytes), static_cast<int64_t>(bytes), allocated);
}

// The cumulative counts of one core since process start; under the lock.
std::array<PoolTotals, kPools> sum_totals(c10::DeviceIndex index) {
  std::array<PoolTotals, kPools> sums{};
  auto add = [&](const Totals& totals) {
    for (int p = 0; p < kPools; ++p) {
      for (int k = 0; k < kTotals; ++k) {
        sums[p][k] += totals.cores[index][p][k].load(std::memory_order_relaxed);
      }
    }
  };
  add(g_retired);
  for (const Totals* totals : g_threads) {
    add(*totals);
  }
  return sums;
}

void reset_accumulated_locked(c10::DeviceIndex index) {
  g_baseline[index] = sum_totals(index);
  g_cores[index].num_ooms.store(0, std::memory_order_relaxed);
}

void reset_peaks_of(CoreCounters& core) {
  core.all.reset_peaks();
  for (auto& pool : core.pools) {
    pool.reset_peaks();
  }
}

} // namespace

bool charge_core(c10::DeviceIndex index, size_t bytes, int64_t capacity, int64_t& allocated) {
  auto& core = g_cores[index];
  if (!core.all.try_add(bytes, static_cast<uint64_t>(std::max<int64_t>(capacity, 0)), allocated)) {
    core.num_ooms.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  core.pools[pool_of(bytes)].add(bytes);
  count(index, bytes, /*allocated=*/true);
  return true;
}

void release_core(c10::DeviceIndex index, size_t bytes) {
  auto& core = g_cores[index];
  core.all.sub(bytes);
  core.pools[pool_of(bytes)].sub(bytes);
  count(index, bytes, /*allocated=*/false);
}

int64_t core_allocated_bytes(c10::DeviceIndex index) {
  return g_cores[index].all.bytes();
}

c10::CachingDeviceAllocator::DeviceStats core_stats(c10::DeviceIndex index) {
  std::array<PoolTotals, kPools> totals;
  {
    std::lock_guard<std::mutex> lock(g_threads_mutex);
    totals = sum_totals(index);
    for (int p = 0; p < kPools; ++p) {
      for (int k = 0; k < kTotals; ++k) {
        totals[p][k] -= g_baseline[index][p][k];
      }
    }
  }
  const auto& core = g_cores[index];
  StatArray bytes, blocks;
  const auto all = static_cast<size_t>(StatType::AGGREGATE);
  core.all.fill(bytes[all], blocks[all]);
  for (int p = 0; p < kPools; ++p) {
    const auto type = static_cast<size_t>(p == 0 ? StatType::SMALL_POOL : StatType::LARGE_POOL);
    core.pools[p].fill(bytes[type], blocks[type]);
    bytes[type].allocated = totals[p][kAllocatedBytes];
    bytes[type].freed = totals[p][kFreedBytes];
    blocks[type].allocated = totals[p][kAllocatedBlocks];
    blocks[type].freed = totals[p][kFreedBlocks];
    bytes[all].allocated += bytes[type].allocated;
    bytes[all].freed += bytes[type].freed;
    blocks[all].allocated += blocks[type].allocated;
    blocks[all].freed += blocks[type].freed;
  }
  // Without a cache every allocation is its own segment, always active, and
  // reserved == allocated == requested.
  c10::CachingDeviceAllocator::DeviceStats s;
  s.allocated_bytes = s.reserved_bytes = s.active_bytes = s.requested_bytes = bytes;
  s.allocation = s.segment = s.active = blocks;
  s.num_ooms = core.num_ooms.load(std::memory_order_relaxed);
  s.num_device_alloc = blocks[all].allocated;
  s.num_device_free = blocks[all].freed;
  return s;
}

void reset_core_peaks(c10::DeviceIndex index) {
  reset_peaks_of(g_cores[index]);
}

void reset_core_accumulated(c10::DeviceIndex index) {
  std::lock_guard<std::mutex> lock(g_threads_mutex);
  reset_accumulated_locked(index);
}

void core_stats_after_fork() {
  recreate_lock(g_threads_mutex);
  for (int c = 0; c < kMaxCores; ++c) {
    reset_peaks_of(g_cores[c]);
    reset_accumulated_locked(static_cast<c10::DeviceIndex>(c));
  }
}

} // namespace torch_neuronx
