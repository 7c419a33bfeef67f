// Per-core random generators (Hooks.cpp, next to the PrivateUse1 hooks that
// hand them to PyTorch).
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/Device.h>

namespace torch_neuronx {

const at::Generator& default_generator(c10::DeviceIndex index);

} // namespace torch_neuronx
