// The allocator's memory history, as PyTorch's CUDA caching allocator keeps
// it, so that PyTorch's own snapshot tools read ours.
//
// Off (the default) it costs one relaxed load per allocation and free. On, a
// stack is captured with PyTorch's CapturedTraceback (Python frames, and C++
// frames for stacks="all"): cheap to take, turned into file/line/name only
// when a snapshot is asked for. It is taken before the core's lock, because
// it takes the GIL: a thread holding the GIL may be waiting for that lock.
#include "runtime/AllocatorHistory.h"
#include "runtime/AllocatorPools.h"

#include <torch/csrc/profiler/combined_traceback.h>

#include <atomic>
#include <chrono>
#include <limits>
#include <mutex>

namespace torch_neuronx {

std::atomic<bool> g_history_on{false};

namespace {

std::atomic<bool> g_traced{false};
std::atomic<int> g_context{static_cast<int>(RecordContext::NEVER)};
std::atomic<bool> g_cpp_frames{false};
std::atomic<size_t> g_max_entries{std::numeric_limits<size_t>::max()};

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

} // namespace

void TraceLog::record(TraceAction action, uint64_t address, size_t size, Context context) {
  if (!g_traced.load(std::memory_order_relaxed)) {
    return;
  }
  const size_t limit = g_max_entries.load(std::memory_order_relaxed);
  if (limit == 0) {
    return;
  }
  TraceRecord record{action, address, size, now_us(), std::move(context)};
  if (ring_.size() < limit) {
    ring_.push_back(std::move(record));
    return;
  }
  ring_[next_] = std::move(record);
  next_ = (next_ + 1) % limit;
}

std::vector<TraceRecord> TraceLog::records() const {
  std::vector<TraceRecord> ordered(ring_.begin() + static_cast<std::ptrdiff_t>(next_), ring_.end());
  ordered.insert(ordered.end(), ring_.begin(), ring_.begin() + static_cast<std::ptrdiff_t>(next_));
  return ordered;
}

void TraceLog::clear() {
  ring_.clear();
  next_ = 0;
}

void set_memory_history(bool trace, RecordContext context, bool cpp, size_t max_entries,
                        bool clear) {
  // A ring never holds more than the limit: a new limit starts afresh.
  const bool restart = clear || !trace || max_entries != g_max_entries.load();
  g_history_on.store(false, std::memory_order_relaxed);
  g_traced.store(false, std::memory_order_relaxed);
  g_context.store(static_cast<int>(context), std::memory_order_relaxed);
  g_cpp_frames.store(cpp, std::memory_order_relaxed);
  for (CorePools* core : existing_core_pools()) {
    std::lock_guard<CoreLock> lock(core->mutex());
    if (restart) {
      core->trace().clear();
    }
  }
  g_max_entries.store(max_entries, std::memory_order_relaxed);
  g_traced.store(trace, std::memory_order_relaxed);
  g_history_on.store(trace || context != RecordContext::NEVER, std::memory_order_relaxed);
}

bool history_keeps(RecordContext need) {
  return g_context.load(std::memory_order_relaxed) >= static_cast<int>(need);
}

Context gather_context(RecordContext need) {
  if (!history_keeps(need)) {
    return nullptr;
  }
  return torch::CapturedTraceback::gather(
      /*python=*/true, /*script=*/false, g_cpp_frames.load(std::memory_order_relaxed));
}

} // namespace torch_neuronx
