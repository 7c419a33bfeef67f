// The device work this process issues, in issue order, for torch.profiler.
//
// With ProfilerActivity.PrivateUse1, PyTorch hands Kineto the activity
// profiler this library registers (DeviceTrace.cpp): while it records, each
// eager kernel, compiled graph and collective notes what it is, when the host
// issued it and the profiler's correlation id of the innermost op issuing
// it. When the profile stops, Python places the notes on the projected
// device timeline (torch_neuronx/profiling/) and the events come back here
// to be handed to Kineto, which links each to its CPU op.
#pragma once

#include <atomic>
#include <cstdint>

namespace torch_neuronx {

namespace detail {
extern std::atomic<bool> g_device_trace_recording;
} // namespace detail

// Inline: every accounted kernel asks, and with profiling off this load is
// all it costs.
inline bool device_trace_recording() {
  return detail::g_device_trace_recording.load(std::memory_order_relaxed);
}

enum class DeviceWork : uint8_t { kKernel = 0, kGraph = 1, kCollective = 2 };

// One unit of work issued by this thread at `issue_ns` (Unix ns; 0: now) on
// the current core: a kernel by its signature key, a graph or a collective
// by the id Python gave it. Ignored unless a profile is recording.
void note_device_work(DeviceWork kind, uint64_t payload, int64_t issue_ns = 0);

} // namespace torch_neuronx
