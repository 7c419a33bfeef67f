// The boxed CPU fallback kernel (CpuFallback.cpp): runs any op's CPU kernel
// in place on the device memory. Registered by aten/CpuFallbackRoutes.cpp.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace torch_neuronx::native {

void neuron_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

} // namespace torch_neuronx::native
