// Route table: the fused-SDPA backend choice (native/Attention.cpp).
//
// PyTorch asks a per-device stub; a device without one gets the math
// decomposition. The real product registers it (NKI flash attention).
#include "aten/native/Native.h"

#include <ATen/native/transformers/attention.h>
#include <torch/library.h>

namespace at::native {
// Eager SDPA asks this stub directly ...
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &torch_neuronx::native::choose_sdp_backend)
} // namespace at::native

// ... and compiled graphs through the aten op, so both take the same path.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_fused_sdp_choice", &torch_neuronx::native::choose_sdp_backend);
}
