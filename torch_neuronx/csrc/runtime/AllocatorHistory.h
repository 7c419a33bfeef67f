// The allocator's memory history (AllocatorHistory.cpp): what
// torch.neuron.memory._record_memory_history() turns on, in PyTorch's terms.
// Each core keeps a ring of its allocator's events (allocations, frees,
// segments opened and released, out-of-memory errors) and the Python stack
// of each live block, for torch.neuron.memory._snapshot().
#pragma once

#include <c10/core/CachingDeviceAllocator.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace torch_neuronx {

using c10::CachingDeviceAllocator::RecordContext;
using Context = std::shared_ptr<c10::GatheredContext>;

// The actions of PyTorch's snapshot format (its TraceEntry::Action names).
enum class TraceAction : uint8_t {
  kAlloc,
  kFreeRequested,
  kFreeCompleted,
  kSegmentAlloc,
  kSegmentFree,
  kOom,
  kSnapshot,
};

struct TraceRecord {
  TraceAction action;
  uint64_t address; // for kOom: the core's free bytes
  size_t size;
  int64_t time_us;
  Context context;
};

// One core's events, oldest dropped first past the recording's limit. Used
// under the core's lock.
class TraceLog {
 public:
  // Records if the history is on (a relaxed load when it is off).
  void record(TraceAction action, uint64_t address, size_t size, Context context = nullptr);
  std::vector<TraceRecord> records() const; // oldest first
  void clear();

 private:
  std::vector<TraceRecord> ring_;
  size_t next_ = 0; // where the next record goes once the ring is full
};

// Whether the history keeps anything (events or stacks): the allocator's one
// check per allocation and free while it is off.
extern std::atomic<bool> g_history_on;
inline bool history_on() {
  return g_history_on.load(std::memory_order_relaxed);
}

// _record_memory_history's arguments: `trace` keeps the events ("all"),
// `context` which stacks to keep, `cpp` whether stacks include C++ frames.
// Turning the history off, `clear`, or a new `max_entries` empties every
// core's events.
void set_memory_history(bool trace, RecordContext context, bool cpp, size_t max_entries, bool clear);
// Whether stacks are kept for `need` (STATE: live blocks; ALLOC: also the
// allocation events; ALL: also the free events).
bool history_keeps(RecordContext need);
// The calling thread's stack, if the history keeps stacks for `need`;
// gathered before taking a core's lock (it takes the GIL).
Context gather_context(RecordContext need);

} // namespace torch_neuronx
