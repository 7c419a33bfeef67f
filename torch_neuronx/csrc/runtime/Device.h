// The emulated device's topology and the thread-local current core.
//
// Configured once from Python at import (runtime/profiles.py chooses the
// instance profile): how many logical cores this process sees. C++ only
// stores the figures.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <atomic>
#include <cstdint>
#include <string>

namespace torch_neuronx {

constexpr c10::DeviceType kNeuron = c10::DeviceType::PrivateUse1;

inline bool is_neuron(const at::Tensor& t) {
  return t.defined() && t.device().type() == kNeuron;
}

// Called by configure_devices (Allocator.h), which also sets each core's HBM.
void set_device_count(int64_t count);
c10::DeviceIndex device_count() noexcept;
c10::DeviceIndex current_device();
void set_current_device(c10::DeviceIndex index);
// Also the default of threads that never called set_device (torchrun ranks
// set LOCAL_RANK here, as the real runtime does).
void set_default_device(c10::DeviceIndex index);
// Defined in Device.cpp, read inline: every allocation checks both.
extern std::atomic<int> g_device_count;
extern std::atomic<bool> g_initialized;
[[noreturn]] void invalid_device_index(c10::DeviceIndex index);
void initialize_on_first_use();

inline void check_device_index(c10::DeviceIndex index) {
  if (C10_UNLIKELY(index < 0 || index >= g_device_count.load(std::memory_order_relaxed))) {
    invalid_device_index(index);
  }
}
// Set once the runtime has done work (first allocation); mirrors
// `torch.neuron.is_initialized()`.
bool runtime_initialized();
inline void mark_runtime_initialized() {
  if (C10_UNLIKELY(!g_initialized.load(std::memory_order_relaxed))) {
    initialize_on_first_use();
  }
}
// What the real product's torch_neuronx._lazy_init() does (torch.neuron.init(),
// get_device_properties(), init_process_group): initialise, and remember it,
// so that a child forked afterwards is "in a bad fork" and raises the real
// product's message here instead (Fork.cpp).
void initialize_runtime();
bool in_bad_fork();
// A message raised on the first device use (empty = none). The distributed
// layer sets it under torchrun until `init_process_group("neuron")` runs, as
// the real runtime refuses to start before the process group exists.
void set_init_error(std::string message);

} // namespace torch_neuronx
