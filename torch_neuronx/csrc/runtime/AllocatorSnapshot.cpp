// torch.neuron.memory._snapshot(): every core's segments, blocks and
// recorded events in PyTorch's snapshot format (the dictionary
// torch.cuda.memory._snapshot() returns), so PyTorch's memory visualiser
// (torch.cuda._memory_viz, pytorch.org/memory_viz) draws it unchanged.
//
// Each core's state is copied under its lock; the stacks are turned into
// frames afterwards, with the GIL and without any core's lock.
#include "runtime/AllocatorSnapshot.h"
#include "runtime/AllocatorPools.h"
#include "runtime/Device.h"

#include <torch/csrc/Export.h>
#include <torch/csrc/profiler/combined_traceback.h>

#include <mutex>
#include <string>
#include <unordered_map>

// From torch/csrc/profiler/python/combined_traceback.h (libtorch_python),
// whose header needs nlohmann/json, which PyTorch's wheel does not ship.
namespace torch {
TORCH_API std::vector<pybind11::object> py_symbolize(std::vector<CapturedTraceback*>& to_symbolize);
TORCH_PYTHON_API void freeDeadCapturedTracebackFrames();
TORCH_PYTHON_API void installCapturedTracebackPython();
} // namespace torch

namespace torch_neuronx {
namespace {

struct CoreCopy {
  int index = 0;
  std::vector<SegmentView> segments;
  std::vector<TraceRecord> events;
};

const char* action_name(TraceAction action) {
  switch (action) {
    case TraceAction::kAlloc:
      return "alloc";
    case TraceAction::kFreeRequested:
      return "free_requested";
    case TraceAction::kFreeCompleted:
      return "free_completed";
    case TraceAction::kSegmentAlloc:
      return "segment_alloc";
    case TraceAction::kSegmentFree:
      return "segment_free";
    case TraceAction::kOom:
      return "oom";
    case TraceAction::kSnapshot:
      return "snapshot";
  }
  return "unknown";
}

// The frames of every stack in `copies`, symbolized in one batch.
class Frames {
 public:
  explicit Frames(const std::vector<CoreCopy>& copies) {
    std::vector<torch::CapturedTraceback*> tracebacks;
    auto add = [&](const Context& context) {
      if (context != nullptr && index_.emplace(context.get(), tracebacks.size()).second) {
        tracebacks.push_back(torch::getCapturedTracebackFromContext(context));
      }
    };
    for (const auto& copy : copies) {
      for (const auto& segment : copy.segments) {
        for (const auto& block : segment.blocks) {
          add(block.context);
        }
      }
      for (const auto& event : copy.events) {
        add(event.context);
      }
    }
    symbolized_ = torch::py_symbolize(tracebacks);
  }

  py::object of(const Context& context) const {
    if (context == nullptr) {
      return py::list();
    }
    return symbolized_[index_.at(context.get())];
  }

 private:
  std::unordered_map<const c10::GatheredContext*, size_t> index_;
  std::vector<py::object> symbolized_;
};

py::dict segment_dict(int device, const SegmentView& segment, const Frames& frames) {
  py::list blocks;
  size_t allocated = 0;
  size_t requested = 0;
  for (const auto& block : segment.blocks) {
    py::dict b;
    b["address"] = block.address;
    b["size"] = block.size;
    b["requested_size"] = block.requested;
    b["state"] = block.allocated ? "active_allocated" : "inactive";
    b["frames"] = frames.of(block.context);
    blocks.append(std::move(b));
    if (block.allocated) {
      allocated += block.size;
      requested += block.requested;
    }
  }
  py::dict s;
  s["device"] = device;
  s["address"] = segment.address;
  s["total_size"] = segment.size;
  s["allocated_size"] = allocated;
  s["active_size"] = allocated; // no block waits on another stream
  s["requested_size"] = requested;
  s["stream"] = 0;
  s["segment_type"] = segment.small ? "small" : "large";
  s["segment_pool_id"] = py::make_tuple(0, 0);
  s["is_expandable"] = false;
  s["frames"] = py::list();
  s["blocks"] = std::move(blocks);
  return s;
}

py::dict event_dict(const TraceRecord& event, const Frames& frames) {
  py::dict e;
  e["action"] = action_name(event.action);
  e["addr"] = event.address;
  e["size"] = event.size;
  e["stream"] = 0;
  e["time_us"] = event.time_us;
  e["frames"] = frames.of(event.context);
  if (event.action == TraceAction::kOom) {
    e["device_free"] = event.address;
  }
  return e;
}

} // namespace

py::dict memory_snapshot() {
  std::vector<CoreCopy> copies;
  {
    py::gil_scoped_release no_gil; // a core's lock may be held by a thread waiting for the GIL
    for (CorePools* core : existing_core_pools()) {
      std::lock_guard<CoreLock> lock(core->mutex());
      core->trace().record(TraceAction::kSnapshot, 0, 0);
      copies.push_back({core->index(), core->segments(), core->trace().records()});
    }
  }
  torch::freeDeadCapturedTracebackFrames();
  const Frames frames(copies);
  py::list segments;
  py::list traces;
  for (int device = 0; device < static_cast<int>(device_count()); ++device) {
    traces.append(py::list());
  }
  for (const auto& copy : copies) {
    for (const auto& segment : copy.segments) {
      segments.append(segment_dict(copy.index, segment, frames));
    }
    if (copy.index >= static_cast<int>(py::len(traces))) {
      continue; // a core no longer visible after reconfiguring
    }
    py::list events = traces[copy.index];
    for (const auto& event : copy.events) {
      events.append(event_dict(event, frames));
    }
  }
  py::dict snapshot;
  snapshot["segments"] = std::move(segments);
  snapshot["device_traces"] = std::move(traces);
  return snapshot;
}

void record_memory_history(bool trace, int context, bool cpp, size_t max_entries, bool clear) {
  TORCH_CHECK(context >= static_cast<int>(RecordContext::NEVER) &&
                  context <= static_cast<int>(RecordContext::ALL),
              "record_memory_history: context must be 0 (none) to 3 (all), got ", context);
  if (context != static_cast<int>(RecordContext::NEVER)) {
    torch::installCapturedTracebackPython();
  }
  py::gil_scoped_release no_gil;
  set_memory_history(trace, static_cast<RecordContext>(context), cpp, max_entries, clear);
}

} // namespace torch_neuronx
