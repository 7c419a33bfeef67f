// Route table: the ops through which users request a memory layout, checked
// against the device's contiguous-only rule (native/MemoryFormat.cpp).
#include "aten/native/Native.h"

#include <torch/library.h>

namespace torch_neuronx {

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("clone", native::clone);
  m.impl("_to_copy", native::to_copy);
  m.impl("empty_like", native::empty_like);
}

} // namespace torch_neuronx
