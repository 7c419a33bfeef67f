// torch.autocast(device_type="neuron"): CUDA's op lists and policies.
//
// The real product registers AutocastPrivateUse1 kernels from the same lists
// as CUDA; PyTorch exports those lists as X-macros, so we reuse them.
#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace torch_neuronx {
namespace {

at::Tensor binary_cross_entropy_banned(
    const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, int64_t) {
  TORCH_CHECK(false,
      "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe "
      "to autocast.\nMany models use a sigmoid layer right before the binary "
      "cross entropy layer.\nIn this case, combine the two layers using "
      "torch.nn.functional.binary_cross_entropy_with_logits\nor "
      "torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and "
      "BCEWithLogits are\nsafe to autocast.");
}

} // namespace

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

// The op-list macros name types unqualified, as inside namespace at.
using at::IntArrayRef;
using at::Scalar;
using at::ScalarType;
using at::Tensor;

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
#define NEURON_LOWER_PRECISION(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define NEURON_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define NEURON_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define NEURON_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_LOWER_PRECISION_FP(NEURON_LOWER_PRECISION)
  AT_FORALL_FP32(NEURON_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(NEURON_FP32_SET_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
  AT_FORALL_PROMOTE(NEURON_PROMOTE)
#undef NEURON_LOWER_PRECISION
#undef NEURON_FP32
#undef NEURON_FP32_SET_OPT_DTYPE
#undef NEURON_PROMOTE
  m.impl("aten::binary_cross_entropy", TORCH_FN(binary_cross_entropy_banned));
}

} // namespace torch_neuronx
