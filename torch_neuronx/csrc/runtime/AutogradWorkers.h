#pragma once
// The autograd engine's worker threads for `neuron` devices (AutogradWorkers.cpp).
#include <c10/core/Device.h>

#include <vector>

namespace torch_neuronx {

// Returns once the worker of each device in `devices` has finished and dropped
// every graph task queued to it before this call. Call without the GIL.
void settle_autograd_workers(const std::vector<c10::DeviceIndex>& devices);

} // namespace torch_neuronx
