// The neuron kernels of ATen ops, registered by the route tables in aten/:
// NativeRoutes.cpp (memory, views, copies), MemoryFormatRoutes.cpp (layout
// checks), AttentionRoutes.cpp (SDPA backend choice), ScaledMatmulRoutes.cpp
// (FP8 matmuls).
#pragma once

#include <ATen/ATen.h>

#include <array>
#include <optional>
#include <tuple>

namespace torch_neuronx::native {

// ---- memory and metadata (Kernels.cpp) -------------------------------------
at::Tensor empty_memory_format(
    c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
    std::optional<c10::Layout> layout, std::optional<c10::Device> device,
    std::optional<bool> pin_memory, std::optional<c10::MemoryFormat> memory_format);
at::Tensor empty_strided(
    c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<c10::ScalarType> dtype,
    std::optional<c10::Layout> layout, std::optional<c10::Device> device,
    std::optional<bool> pin_memory);
at::Tensor scalar_tensor(
    const c10::Scalar& s, std::optional<c10::ScalarType> dtype,
    std::optional<c10::Layout> layout, std::optional<c10::Device> device,
    std::optional<bool> pin_memory);
// torch.arange: the three overloads PyTorch's composite kernel covers.
at::Tensor arange(
    const c10::Scalar& start, const c10::Scalar& end, const c10::Scalar& step,
    std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
    std::optional<c10::Device> device, std::optional<bool> pin_memory);
at::Tensor arange_start(
    const c10::Scalar& start, const c10::Scalar& end, std::optional<c10::ScalarType> dtype,
    std::optional<c10::Layout> layout, std::optional<c10::Device> device,
    std::optional<bool> pin_memory);
at::Tensor arange_end(
    const c10::Scalar& end, std::optional<c10::ScalarType> dtype,
    std::optional<c10::Layout> layout, std::optional<c10::Device> device,
    std::optional<bool> pin_memory);
const at::Tensor& resize_(
    const at::Tensor& self, c10::SymIntArrayRef size,
    std::optional<c10::MemoryFormat> memory_format);
at::Tensor& set_storage(
    at::Tensor& self, c10::Storage source, int64_t storage_offset,
    c10::IntArrayRef size, c10::IntArrayRef stride);
at::Tensor& set_empty(at::Tensor& self);
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from);
void record_stream(at::Tensor& self, c10::Stream stream);

// ---- copies between host and device (Kernels.cpp) --------------------------
at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking);
at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst);
c10::Scalar local_scalar_dense(const at::Tensor& self);

// ---- ops with no CPU kernel the fallback could reuse (Kernels.cpp) ---------
at::Tensor convolution_overrideable(
    const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
    c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation,
    bool transposed, c10::IntArrayRef output_padding, int64_t groups);
std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward_overrideable(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation,
    bool transposed, c10::IntArrayRef output_padding, int64_t groups,
    std::array<bool, 3> output_mask);
at::Tensor histc(const at::Tensor& self, int64_t bins, const at::Scalar& min, const at::Scalar& max);

// ---- the device's memory-format rule (MemoryFormat.cpp) --------------------
at::Tensor clone(const at::Tensor& self, std::optional<c10::MemoryFormat> format);
at::Tensor to_copy(
    const at::Tensor& self, std::optional<c10::ScalarType> dtype,
    std::optional<c10::Layout> layout, std::optional<c10::Device> device,
    std::optional<bool> pin_memory, bool non_blocking,
    std::optional<c10::MemoryFormat> format);
at::Tensor empty_like(
    const at::Tensor& self, std::optional<c10::ScalarType> dtype,
    std::optional<c10::Layout> layout, std::optional<c10::Device> device,
    std::optional<bool> pin_memory, std::optional<c10::MemoryFormat> format);

// ---- FP8 matrix multiplication (ScaledMatmul.cpp) --------------------------
at::Tensor scaled_mm(
    const at::Tensor& self, const at::Tensor& mat2, const at::Tensor& scale_a,
    const at::Tensor& scale_b, const std::optional<at::Tensor>& bias,
    const std::optional<at::Tensor>& scale_result, std::optional<at::ScalarType> out_dtype,
    bool use_fast_accum);
at::Tensor scaled_mm_v2(
    const at::Tensor& self, const at::Tensor& mat2, at::TensorList scale_a,
    at::IntArrayRef recipe_a, at::IntArrayRef swizzle_a, at::TensorList scale_b,
    at::IntArrayRef recipe_b, at::IntArrayRef swizzle_b, const std::optional<at::Tensor>& bias,
    std::optional<at::ScalarType> out_dtype, at::IntArrayRef contraction_dim, bool use_fast_accum);

// ---- attention (Attention.cpp) ---------------------------------------------
// TORCH_NEURONX_ENABLE_NKI_SDPA: SDPA runs as one fused flash kernel when the
// inputs allow it (true), or always as the math decomposition (false).
void set_fused_attention(bool enabled);
int64_t choose_sdp_backend(
    const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
    const std::optional<at::Tensor>& attn_mask, double dropout_p, bool is_causal,
    std::optional<double> scale, bool enable_gqa);

} // namespace torch_neuronx::native
