// One core's device memory laid out as the real product's caching segment
// allocator lays it out (Neuron "Guidelines for memory management"): the
// allocator takes segments from the core's HBM and places tensors as blocks
// inside them; a freed block stays in its segment for reuse and is not
// returned, so the core's reserved bytes (its segments) stay at or above its
// allocated bytes (its live blocks), and the capacity check is on reserved.
// `empty_cache` returns the segments no tensor uses.
//
// The pools follow PyTorch's CUDA caching allocator: a request takes a
// cached free block of its pool that is large enough, or opens a segment
// (AllocatorSizes.h); a block larger than asked for is split when the rest is
// worth keeping (in the small pool 256 bytes, in the large pool 1 MiB, so the
// large pool never holds small blocks); a freed block merges with free
// neighbours. Free blocks are binned by size class with a bitmap of non-empty
// bins, so finding one takes constant time (a "good fit": the smallest
// non-empty class that holds the request, the most recently freed block of
// it), which keeps the per-op cost of every result's allocation and free
// small. Segment addresses are emulated: each core has its own range, and a
// released segment's addresses are reused.
#include "runtime/AllocatorPools.h"
#include "runtime/Fork.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <mutex>

namespace torch_neuronx {
namespace {

using c10::CachingAllocator::StatArray;
using c10::CachingAllocator::StatType;

// Each core's emulated addresses: 16 TiB from (index + 1) * 16 TiB, far more
// than its HBM (kMaxCoreBytes), so a run never exhausts them.
constexpr int kAddressBits = 44;

// The bin of a free block: sizes below 1 KiB by 256 bytes, then four per
// doubling. A rounded request (AllocatorSizes.h) is the lower bound of its
// bin, so every block in it is large enough.
constexpr int bin_of(size_t size) {
  if (size < 1024) {
    return static_cast<int>(size / kMinBlockBytes);
  }
  const int k = 63 - __builtin_clzll(size); // 2^k <= size < 2^(k+1)
  return 4 + (k - 10) * 4 + static_cast<int>((size >> (k - 2)) & 3);
}

C10_ALWAYS_INLINE void add(StatArray& stat, bool small, size_t amount) {
  stat[static_cast<size_t>(StatType::AGGREGATE)].increase(amount);
  stat[static_cast<size_t>(small ? StatType::SMALL_POOL : StatType::LARGE_POOL)].increase(amount);
}

C10_ALWAYS_INLINE void sub(StatArray& stat, bool small, size_t amount) {
  stat[static_cast<size_t>(StatType::AGGREGATE)].decrease(amount);
  stat[static_cast<size_t>(small ? StatType::SMALL_POOL : StatType::LARGE_POOL)].decrease(amount);
}

// A free block that is its whole segment can be returned; one that is not
// is "inactive split" memory in PyTorch's statistics.
bool is_whole_segment(const Block* block) {
  return block->prev == nullptr && block->next == nullptr;
}

template <typename Fn>
void for_each_stat_array(c10::CachingDeviceAllocator::DeviceStats& s, Fn fn) {
  for (StatArray* a : {&s.allocation, &s.segment, &s.active, &s.inactive_split,
                       &s.allocated_bytes, &s.reserved_bytes, &s.active_bytes,
                       &s.inactive_split_bytes, &s.requested_bytes}) {
    for (auto& stat : *a) {
      fn(stat);
    }
  }
}

} // namespace

// ---- free bins --------------------------------------------------------------

void FreeBins::insert(Block* block) {
  const int bin = bin_of(block->size);
  block->bin_prev = nullptr;
  block->bin_next = heads_[bin];
  if (heads_[bin] != nullptr) {
    heads_[bin]->bin_prev = block;
  }
  heads_[bin] = block;
  nonempty_[bin / 64] |= uint64_t{1} << (bin % 64);
}

void FreeBins::remove(Block* block) {
  const int bin = bin_of(block->size);
  if (block->bin_prev != nullptr) {
    block->bin_prev->bin_next = block->bin_next;
  } else {
    heads_[bin] = block->bin_next;
  }
  if (block->bin_next != nullptr) {
    block->bin_next->bin_prev = block->bin_prev;
  }
  block->bin_prev = block->bin_next = nullptr;
  if (heads_[bin] == nullptr) {
    nonempty_[bin / 64] &= ~(uint64_t{1} << (bin % 64));
  }
}

Block* FreeBins::find(size_t bytes) const {
  const int bin = bin_of(bytes);
  // Only an unrounded request (16 MiB and more) can be larger than blocks of its own bin.
  for (Block* block = heads_[bin]; block != nullptr; block = block->bin_next) {
    if (block->size >= bytes) {
      return block;
    }
  }
  for (int word = (bin + 1) / 64; word < static_cast<int>(nonempty_.size()); ++word) {
    uint64_t bits = nonempty_[word];
    if (word == (bin + 1) / 64) {
      bits &= ~uint64_t{0} << ((bin + 1) % 64);
    }
    if (bits != 0) {
      return heads_[word * 64 + __builtin_ctzll(bits)];
    }
  }
  return nullptr;
}

// ---- one core's pools -------------------------------------------------------

CorePools::CorePools(int index)
    : index_(index),
      addresses_(static_cast<uint64_t>(index + 1) << kAddressBits, uint64_t{1} << kAddressBits) {}

// Only a layout_bytes() core ends: the cores' pools live as long as the process.
CorePools::~CorePools() {
  for (auto& [address, segment] : segments_) {
    for (Block* block = segment.head; block != nullptr;) {
      Block* next = block->next;
      delete block;
      block = next;
    }
  }
  for (Block* block : spare_blocks_) {
    delete block;
  }
}

Block* CorePools::allocate(size_t requested, int64_t capacity, Context&& context) {
  const bool small = is_small_request(requested);
  const size_t bytes = block_bytes(requested);
  Block* block = small ? take_quick(bytes) : nullptr;
  if (block == nullptr) {
    block = take_free(small, bytes, requested, capacity);
    if (block == nullptr) {
      return nullptr;
    }
    block = split(block, bytes);
  }
  block->allocated = true;
  block->requested = requested;
  add(stats_.allocation, small, 1);
  add(stats_.allocated_bytes, small, block->size);
  add(stats_.requested_bytes, small, requested);
  if (C10_UNLIKELY(history_on())) {
    trace_.record(TraceAction::kAlloc, block->address, block->size,
                  history_keeps(RecordContext::ALLOC) ? context : nullptr);
    block->context = std::move(context);
  }
  return block;
}

// A cached block of at least `bytes` out of its bin, or a new segment.
Block* CorePools::take_free(bool small, size_t bytes, size_t requested, int64_t capacity) {
  FreeBins& bins = small ? small_bins_ : large_bins_;
  Block* block = bins.find(bytes);
  if (block == nullptr && small && quick_blocks_ > 0) {
    merge_quick(); // the room they hold, merged, may fit
    block = bins.find(bytes);
  }
  if (block == nullptr) {
    return open_segment(requested, capacity);
  }
  uncache(block);
  return block;
}

void CorePools::free(Block* block, Context&& context) {
  sub(stats_.allocation, block->small, 1);
  sub(stats_.allocated_bytes, block->small, block->size);
  sub(stats_.requested_bytes, block->small, block->requested);
  if (C10_UNLIKELY(history_on() || block->context != nullptr)) {
    trace_.record(TraceAction::kFreeRequested, block->address, block->size, context);
    trace_.record(TraceAction::kFreeCompleted, block->address, block->size, std::move(context));
    block->context.reset();
  }
  block->allocated = false;
  block->requested = 0;
  if (!block->small || !keep_quick(block)) {
    merge_and_cache(block);
  }
}

// A free block merged with its free neighbours (into the lower one, so a
// segment's first block lives as long as the segment), then binned.
void CorePools::merge_and_cache(Block* block) {
  const auto mergeable = [](const Block* b) { return b != nullptr && !b->allocated && !b->quick; };
  if (mergeable(block->prev)) {
    Block* prev = block->prev;
    uncache(prev);
    absorb(prev, block);
    block = prev;
  }
  if (mergeable(block->next)) {
    Block* next = block->next;
    uncache(next);
    absorb(block, next);
  }
  cache(block);
}

// `upper`, the block after `lower`, becomes part of it.
void CorePools::absorb(Block* lower, Block* upper) {
  lower->size += upper->size;
  lower->next = upper->next;
  if (upper->next != nullptr) {
    upper->next->prev = lower;
  }
  recycle(upper);
}

// ---- quick lists: the small pool's freed blocks, kept whole ------------------
//
// A training step or a decode loop frees and asks for the same small sizes
// over and over; keeping a freed block whole for the next request of its
// class skips a split, a merge and two bin updates per op result. A quick
// block is free space inside a used segment (inactive split, as in PyTorch's
// statistics; a small block is never a whole segment): counted in the
// current figures when they are read, not in the inactive-split peaks and
// totals, which would cost four statistics per op result. The lists are merged
// into the bins when a request finds no block there, before a segment is
// opened, and before unused segments are released, so they never make the
// core reserve more.

Block* CorePools::take_quick(size_t bytes) {
  static_assert(bin_of(kSmallRequestLimit) < kQuickClasses);
  QuickList& list = quick_[bin_of(bytes)];
  Block* block = list.head;
  if (block == nullptr) {
    return nullptr;
  }
  list.head = block->bin_next;
  --list.count;
  --quick_blocks_;
  quick_bytes_ -= block->size;
  block->bin_next = nullptr;
  block->quick = false;
  return block;
}

bool CorePools::keep_quick(Block* block) {
  QuickList& list = quick_[bin_of(block->size)];
  if (list.count == kQuickDepth) {
    return false;
  }
  block->quick = true;
  block->bin_next = list.head;
  list.head = block;
  ++list.count;
  ++quick_blocks_;
  quick_bytes_ += block->size;
  return true;
}

void CorePools::merge_quick() {
  for (QuickList& list : quick_) {
    while (list.head != nullptr) {
      Block* block = list.head;
      list.head = block->bin_next;
      block->bin_next = nullptr;
      block->quick = false;
      merge_and_cache(block);
    }
    list.count = 0;
  }
  quick_blocks_ = 0;
  quick_bytes_ = 0;
}

int CorePools::release_unused_segments() {
  merge_quick();
  int released = 0;
  for (auto it = segments_.begin(); it != segments_.end();) {
    Block* head = (it++)->second.head; // close_segment erases the entry
    if (!head->allocated && head->next == nullptr) {
      close_segment(head);
      ++released;
    }
  }
  return released;
}

Block* CorePools::open_segment(size_t requested, int64_t capacity) {
  const size_t size = segment_bytes(requested);
  const auto fits = [&] {
    return static_cast<int64_t>(size) <= capacity - reserved_bytes();
  };
  if (!fits()) {
    ++stats_.num_alloc_retries;
    release_unused_segments();
    if (!fits()) {
      return nullptr;
    }
  }
  Block* head = new_block();
  head->address = addresses_.take(size);
  head->size = size;
  head->small = is_small_request(requested);
  segments_.emplace(head->address, Segment{head, size});
  add(stats_.segment, head->small, 1);
  add(stats_.reserved_bytes, head->small, size);
  ++stats_.num_device_alloc;
  trace_.record(TraceAction::kSegmentAlloc, head->address, size);
  return head;
}

void CorePools::close_segment(Block* head) {
  uncache(head);
  sub(stats_.segment, head->small, 1);
  sub(stats_.reserved_bytes, head->small, head->size);
  ++stats_.num_device_free;
  trace_.record(TraceAction::kSegmentFree, head->address, head->size);
  addresses_.give_back(head->address, head->size);
  segments_.erase(head->address);
  recycle(head);
}

// `block` (free, out of its bin) cut to `bytes`, the rest cached if worth keeping.
Block* CorePools::split(Block* block, size_t bytes) {
  const size_t rest = block->size - bytes;
  if (rest < (block->small ? kMinBlockBytes : kSmallRequestLimit)) {
    return block;
  }
  Block* remainder = new_block();
  remainder->address = block->address + bytes;
  remainder->size = rest;
  remainder->small = block->small;
  remainder->prev = block;
  remainder->next = block->next;
  if (block->next != nullptr) {
    block->next->prev = remainder;
  }
  block->next = remainder;
  block->size = bytes;
  cache(remainder);
  return block;
}

// A free block's neighbours change only while it is out of its bin, so its
// "inactive split" status is the same when it leaves as when it entered.
void CorePools::cache(Block* block) {
  (block->small ? small_bins_ : large_bins_).insert(block);
  if (!is_whole_segment(block)) {
    add(stats_.inactive_split, block->small, 1);
    add(stats_.inactive_split_bytes, block->small, block->size);
  }
}

void CorePools::uncache(Block* block) {
  (block->small ? small_bins_ : large_bins_).remove(block);
  if (!is_whole_segment(block)) {
    sub(stats_.inactive_split, block->small, 1);
    sub(stats_.inactive_split_bytes, block->small, block->size);
  }
}

Block* CorePools::new_block() {
  if (spare_blocks_.empty()) {
    return new Block();
  }
  Block* block = spare_blocks_.back();
  spare_blocks_.pop_back();
  return block;
}

void CorePools::recycle(Block* block) {
  *block = Block();
  spare_blocks_.push_back(block);
}

CorePools::DeviceStats CorePools::stats() const {
  DeviceStats s = stats_;
  for (const auto type : {StatType::AGGREGATE, StatType::SMALL_POOL}) {
    auto& blocks = s.inactive_split[static_cast<size_t>(type)];
    auto& bytes = s.inactive_split_bytes[static_cast<size_t>(type)];
    blocks.current += quick_blocks_;
    bytes.current += quick_bytes_;
    blocks.peak = std::max(blocks.peak, blocks.current);
    bytes.peak = std::max(bytes.peak, bytes.current);
  }
  // Nothing waits on another stream here: every allocated block is active.
  s.active = s.allocation;
  s.active_bytes = s.allocated_bytes;
  return s;
}

void CorePools::reset_peaks() {
  for_each_stat_array(stats_, [](auto& stat) { stat.reset_peak(); });
}

void CorePools::reset_accumulated() {
  for_each_stat_array(stats_, [](auto& stat) { stat.reset_accumulated(); });
  stats_.num_alloc_retries = stats_.num_ooms = 0;
  stats_.num_device_alloc = stats_.num_device_free = 0;
}

void CorePools::after_fork() {
  lock_.reset();
  reset_peaks();
  reset_accumulated();
}

std::vector<SegmentView> CorePools::segments() const {
  std::vector<SegmentView> views;
  views.reserve(segments_.size());
  for (const auto& [address, segment] : segments_) {
    SegmentView view{address, segment.size, segment.head->small, {}};
    for (const Block* block = segment.head; block != nullptr; block = block->next) {
      view.blocks.push_back(*block);
      view.blocks.back().prev = view.blocks.back().next = nullptr;
    }
    views.push_back(std::move(view));
  }
  return views;
}

// ---- the cores --------------------------------------------------------------

std::array<std::atomic<CorePools*>, kMaxCores> g_core_pools{};

namespace {

std::mutex g_cores_mutex; // only to make a core's pools

void cores_after_fork() {
  recreate_lock(g_cores_mutex);
  for (CorePools* core : existing_core_pools()) {
    core->after_fork();
  }
}

const bool g_pools_fork_handler = on_fork_child(&cores_after_fork);

} // namespace

CorePools& make_core_pools(int index) {
  std::lock_guard<std::mutex> lock(g_cores_mutex);
  CorePools* core = g_core_pools[index].load(std::memory_order_relaxed);
  if (core == nullptr) {
    core = new CorePools(index);
    g_core_pools[index].store(core, std::memory_order_release);
  }
  return *core;
}

std::pair<int64_t, int64_t> layout_bytes(const std::vector<size_t>& requests) {
  CorePools pools(-1); // among no device's cores: no statistic or snapshot sees it
  for (const size_t bytes : requests) {
    TORCH_CHECK(bytes > 0, "layout_bytes: every request must be > 0 bytes");
    pools.allocate(bytes, std::numeric_limits<int64_t>::max(), Context());
  }
  return {pools.allocated_bytes(), pools.reserved_bytes()};
}

std::vector<CorePools*> existing_core_pools() {
  std::vector<CorePools*> cores;
  for (auto& slot : g_core_pools) {
    if (CorePools* core = slot.load(std::memory_order_acquire)) {
      cores.push_back(core);
    }
  }
  return cores;
}

} // namespace torch_neuronx
