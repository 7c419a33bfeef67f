// Per-core memory statistics of the emulated HBM, kept without a lock
// (AllocatorStats.cpp). The allocator (Allocator.cpp) charges and releases;
// torch.neuron.memory_stats() and friends read.
#pragma once

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Device.h>

#include <cstddef>
#include <cstdint>

namespace torch_neuronx {

// configure_devices' bound on logical cores.
constexpr int kMaxCores = 128;
// The most bytes one core can have live (the live-memory word's byte field).
constexpr int64_t kMaxCoreBytes = (int64_t{1} << 40) - 1;

// Charges one block of `bytes` to core `index` if its live bytes stay within
// `capacity`. Otherwise nothing changes but the core's out-of-memory count,
// and `allocated` holds the live bytes that made it fail.
bool charge_core(c10::DeviceIndex index, size_t bytes, int64_t capacity, int64_t& allocated);
void release_core(c10::DeviceIndex index, size_t bytes);
int64_t core_allocated_bytes(c10::DeviceIndex index);
c10::CachingDeviceAllocator::DeviceStats core_stats(c10::DeviceIndex index);
void reset_core_peaks(c10::DeviceIndex index);
void reset_core_accumulated(c10::DeviceIndex index);
// In a forked child (the allocator's fork handler): live memory stays, peaks
// and cumulative counts start over.
void core_stats_after_fork();

} // namespace torch_neuronx
