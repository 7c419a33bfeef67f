// Emulated HBM: host memory charged per logical NeuronCore (Allocator.cpp).
#pragma once

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Storage.h>

#include <cstdint>

namespace torch_neuronx {

// How many logical cores this process sees and how many bytes of HBM each has.
void configure_devices(int64_t count, int64_t capacity_bytes);
c10::DeviceAllocator* allocator();
int64_t device_capacity(c10::DeviceIndex index);
// Wrap memory that a CPU kernel allocated as neuron memory of `index`,
// charging it against that core's capacity (raises OutOfMemoryError).
c10::DataPtr adopt_cpu_storage(const c10::Storage& cpu_storage, c10::DeviceIndex index);
// The same for a CPU storage nothing else references: its own memory becomes
// neuron memory of `index` in place (its data pointer and allocator change).
// On OutOfMemoryError the storage is left as it was.
void adopt_cpu_storage_in_place(c10::StorageImpl& storage, c10::DeviceIndex index);

} // namespace torch_neuronx
