// FP8 matrix multiplication (torch._scaled_mm) as the chip runs it.
//
// Tensor-wise and row-wise scales run the host's own kernel on the device
// memory, so results equal CPU's. The MX block-scaled form (OCP MXFP8: FP8
// values with one power-of-two scale, float8_e8m0fnu, per 32 along K) runs on
// NeuronCore-v4 only (Trn3; Neuron 2.34's TorchAO Neuron runs MXFP8Linear
// through aten::_scaled_mm); the host has no kernel for it, so it is
// emulated exactly: each block is scaled by its power of two, then an FP32
// matmul accumulates. Scales are taken unswizzled: (M, K/32) for the first
// operand and (N, K/32) for the second. FP8 formats the instance refuses fail
// as every kernel's arguments do (aten/native/Call.h), and the result is
// rounded stochastically when that is on.
#include "aten/native/CpuFallback.h"
#include "aten/native/FastPath.h"
#include "aten/native/Native.h"
#include "numerics/Precision.h"

#include <ATen/ops/_scaled_mm.h>

namespace torch_neuronx::native {
namespace {

constexpr int64_t kMxBlock = 32;
constexpr int64_t kBlockWise1x32 = 3; // torch.nn.functional.ScalingType.BlockWise1x32
constexpr int64_t kNoSwizzle = 0;     // torch.nn.functional.SwizzleType.NO_SWIZZLE

at::Tensor mapped(CallState& state, const at::Tensor& t) {
  if (!t.defined() || t.device().type() != kNeuron) {
    if (t.defined()) {
      state.note_other(t);
    }
    return t;
  }
  return *state.alias(t, Access::kRead);
}

std::optional<at::Tensor> mapped(CallState& state, const std::optional<at::Tensor>& t) {
  return t.has_value() ? std::optional<at::Tensor>(mapped(state, *t)) : std::nullopt;
}

// The FP32 result written as `dtype`: rounded as the chip writes it.
at::Tensor written_as(at::Tensor&& result, at::ScalarType dtype) {
  if (stochastic_rounding_enabled() && is_narrow_float(dtype)) {
    return round_stochastically(result, dtype);
  }
  return result.to(dtype);
}

at::Tensor mx_matmul(const at::Tensor& a, const at::Tensor& b, const at::Tensor& scale_a,
                     const at::Tensor& scale_b, const std::optional<at::Tensor>& bias,
                     at::ScalarType out_dtype) {
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0),
              "_scaled_mm: MX operands must be (M, K) and (K, N), got ", a.sizes(), " and ", b.sizes());
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  TORCH_CHECK(k % kMxBlock == 0, "_scaled_mm: MX scaling needs K divisible by 32, got K=", k);
  TORCH_CHECK(scale_a.sizes() == at::IntArrayRef({m, k / kMxBlock}) &&
                  scale_b.sizes() == at::IntArrayRef({n, k / kMxBlock}),
              "_scaled_mm: MX scales must be unswizzled, (M, K/32) = (", m, ", ", k / kMxBlock,
              ") and (N, K/32) = (", n, ", ", k / kMxBlock, "), got ", scale_a.sizes(), " and ",
              scale_b.sizes(), " (swizzled layouts are not taken)");
  const at::Tensor a32 = a.to(at::kFloat) * scale_a.to(at::kFloat).repeat_interleave(kMxBlock, 1);
  const at::Tensor b32 = b.to(at::kFloat) * scale_b.to(at::kFloat).repeat_interleave(kMxBlock, 1).t();
  at::Tensor result = a32.mm(b32);
  if (bias.has_value() && bias->defined()) {
    result.add_(bias->to(at::kFloat));
  }
  return written_as(std::move(result), out_dtype);
}

} // namespace

at::Tensor scaled_mm(const at::Tensor& self, const at::Tensor& mat2, const at::Tensor& scale_a,
                     const at::Tensor& scale_b, const std::optional<at::Tensor>& bias,
                     const std::optional<at::Tensor>& scale_result,
                     std::optional<at::ScalarType> out_dtype, bool use_fast_accum) {
  using Kernel = FastKernel<at::_ops::_scaled_mm>;
  CallState state(/*aten_kernel=*/true);
  const at::Tensor a = mapped(state, self), b = mapped(state, mat2);
  const at::Tensor sa = mapped(state, scale_a), sb = mapped(state, scale_b);
  const auto bias_alias = mapped(state, bias);
  const auto result_scale = mapped(state, scale_result);
  state.check_devices(Kernel::handle().operator_name());
  const auto out = out_dtype.value_or(self.scalar_type());
  at::Tensor result;
  if (scale_a.scalar_type() == at::kFloat8_e8m0fnu) {
    check_mx_supported("aten::_scaled_mm");
    Kernel::account(self, mat2, scale_a, scale_b, bias, scale_result, out_dtype, use_fast_accum);
    HostPoolScope scope;
    result = mx_matmul(a, b, sa, sb, bias_alias, out);
  } else {
    Kernel::account(self, mat2, scale_a, scale_b, bias, scale_result, out_dtype, use_fast_accum);
    HostPoolScope scope;
    const bool stochastic = stochastic_rounding_enabled() && is_narrow_float(out) && out != a.scalar_type();
    result = at::_scaled_mm(a, b, sa, sb, bias_alias, result_scale,
                            stochastic ? std::optional<at::ScalarType>(at::kFloat) : out_dtype, use_fast_accum);
    if (stochastic) {
      result = round_stochastically(result, out);
    }
  }
  return state.to_neuron(std::move(result));
}

// torch.nn.functional.scaled_mm: MXFP8 (BlockWise1x32, unswizzled) as above;
// every other recipe runs the host's kernel through the fallback.
at::Tensor scaled_mm_v2(const at::Tensor& self, const at::Tensor& mat2, at::TensorList scale_a,
                        at::IntArrayRef recipe_a, at::IntArrayRef swizzle_a, at::TensorList scale_b,
                        at::IntArrayRef recipe_b, at::IntArrayRef swizzle_b,
                        const std::optional<at::Tensor>& bias, std::optional<at::ScalarType> out_dtype,
                        at::IntArrayRef contraction_dim, bool use_fast_accum) {
  using Kernel = FastKernel<at::_ops::_scaled_mm_v2>;
  auto is_mx = [](at::IntArrayRef recipe, at::IntArrayRef swizzle) {
    return recipe.size() == 1 && recipe[0] == kBlockWise1x32 &&
        (swizzle.empty() || (swizzle.size() == 1 && swizzle[0] == kNoSwizzle));
  };
  if (!is_mx(recipe_a, swizzle_a) || !is_mx(recipe_b, swizzle_b) || scale_a.size() != 1 ||
      scale_b.size() != 1) {
    static const c10::BoxedKernel fallback = c10::BoxedKernel::makeFromFunction<&neuron_fallback>();
    return c10::impl::BoxedKernelWrapper<decltype(scaled_mm_v2)>::call(
        fallback, Kernel::handle(), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), self, mat2,
        scale_a, recipe_a, swizzle_a, scale_b, recipe_b, swizzle_b, bias, out_dtype, contraction_dim,
        use_fast_accum);
  }
  TORCH_CHECK(contraction_dim.empty(), "_scaled_mm_v2: MX scaling contracts the default dimensions");
  CallState state(/*aten_kernel=*/true);
  const at::Tensor a = mapped(state, self), b = mapped(state, mat2);
  const at::Tensor sa = mapped(state, scale_a[0]), sb = mapped(state, scale_b[0]);
  const auto bias_alias = mapped(state, bias);
  state.check_devices(Kernel::handle().operator_name());
  check_mx_supported("aten::_scaled_mm_v2");
  Kernel::account(self, mat2, scale_a, recipe_a, swizzle_a, scale_b, recipe_b, swizzle_b, bias,
                  out_dtype, contraction_dim, use_fast_accum);
  HostPoolScope scope;
  return state.to_neuron(mx_matmul(a, b, sa, sb, bias_alias, out_dtype.value_or(at::kBFloat16)));
}

} // namespace torch_neuronx::native
