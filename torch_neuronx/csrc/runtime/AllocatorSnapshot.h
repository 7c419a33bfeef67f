// The allocator's history and snapshot as Python sees them
// (AllocatorSnapshot.cpp): torch.neuron.memory._record_memory_history() and
// _snapshot() call these, with the GIL.
#pragma once

#include <torch/csrc/utils/pybind.h>

#include <cstddef>

namespace torch_neuronx {

// `context`: c10's RecordContext (0 none, 1 live blocks, 2 also allocation
// events, 3 also free events); see AllocatorHistory.h.
void record_memory_history(bool trace, int context, bool cpp, size_t max_entries, bool clear);
// PyTorch's snapshot dictionary: "segments" and "device_traces".
py::dict memory_snapshot();

} // namespace torch_neuronx
