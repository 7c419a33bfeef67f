// Route table: FP8 matrix multiplication (native/ScaledMatmul.cpp), for the
// FP8 formats and MX block scaling of the selected instance.
#include "aten/Routes.h"
#include "aten/native/Native.h"

#include <torch/library.h>

namespace torch_neuronx {

std::vector<std::string> accounted_native_ops() {
  // Registered below: each accounts its call as the op's own kernel.
  return {"_scaled_mm", "_scaled_mm_v2"};
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_scaled_mm", native::scaled_mm);
  m.impl("_scaled_mm_v2", native::scaled_mm_v2);
}

} // namespace torch_neuronx
