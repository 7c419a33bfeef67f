// Native neuron kernels: memory, metadata and copies (registered in
// aten/NativeRoutes.cpp).
//
// These must not go through the fallback: factories allocate on the right
// core, views must share the neuron storage itself (not an alias of it), and
// copies are where host<->device transfers happen. Views reuse PyTorch's
// device-generic implementations, since neuron memory is host memory.
#include "aten/native/FastPath.h"
#include "aten/native/Native.h"
#include "numerics/Narrowing.h"
#include "numerics/Precision.h"
#include "runtime/Alias.h"
#include "runtime/Allocator.h"
#include "runtime/Device.h"

#include <ATen/EmptyTensor.h>
#include <ATen/ScalarOps.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/arange_cpu_dispatch.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/set_native.h>

namespace torch_neuronx::native {
namespace {

c10::DeviceIndex index_of(std::optional<c10::Device> device) {
  if (device && device->has_index()) {
    check_device_index(device->index());
    return device->index();
  }
  return current_device();
}

// An int64 arange is monotonic: every value fits in int32 when both ends do,
// which spares scanning it (the decode loop builds ~20 per token).
bool ends_fit_in_int32(const at::Tensor& range) {
  const int64_t n = range.numel();
  if (n == 0) {
    return true;
  }
  const int64_t* values = range.const_data_ptr<int64_t>();
  auto fits = [](int64_t v) { return v == static_cast<int32_t>(v); };
  return fits(values[0]) && fits(values[n - 1]);
}

} // namespace

at::Tensor empty_memory_format(
    c10::IntArrayRef size,
    std::optional<c10::ScalarType> dtype,
    std::optional<c10::Layout> layout,
    std::optional<c10::Device> device,
    std::optional<bool> pin_memory,
    std::optional<c10::MemoryFormat> memory_format) {
  TORCH_CHECK(layout.value_or(c10::kStrided) == c10::kStrided,
              "neuron tensors support only the strided layout, got ", *layout);
  c10::DeviceGuard guard(c10::Device(kNeuron, index_of(device)));
  return at::detail::empty_generic(
      size, allocator(), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
      c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(
    c10::IntArrayRef size,
    c10::IntArrayRef stride,
    std::optional<c10::ScalarType> dtype,
    std::optional<c10::Layout> layout,
    std::optional<c10::Device> device,
    std::optional<bool> pin_memory) {
  TORCH_CHECK(layout.value_or(c10::kStrided) == c10::kStrided,
              "neuron tensors support only the strided layout, got ", *layout);
  c10::DeviceGuard guard(c10::Device(kNeuron, index_of(device)));
  return at::detail::empty_strided_generic(
      size, stride, allocator(),
      c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
      c10::dtype_or_default(dtype));
}

// PyTorch's composite kernel is empty() then fill_() (SDPA builds two per
// call for a boolean mask): two trips through the dispatcher and a fast-path
// call for one number. The real product runs those same two steps, so the
// fill_ kernel is accounted exactly as that call would be (value static); the
// number is written on the host and the memory adopted, charged as empty()'s.
at::Tensor scalar_tensor(
    const c10::Scalar& s,
    std::optional<c10::ScalarType> dtype,
    std::optional<c10::Layout> layout,
    std::optional<c10::Device> device,
    std::optional<bool> pin_memory) {
  using Fill = FastKernel<at::_ops::fill__Scalar>;
  const auto type = c10::dtype_or_default(dtype);
  if (type == at::kLong || type == at::kDouble) {
    // 64-bit values keep the fill_ path: it applies the narrowing mode.
    at::Tensor t = empty_memory_format({}, type, layout, device, pin_memory, std::nullopt);
    return Fill::call(t, s);
  }
  TORCH_CHECK(layout.value_or(c10::kStrided) == c10::kStrided,
              "neuron tensors support only the strided layout, got ", *layout);
  at::Tensor value = at::detail::scalar_tensor_static(s, type, at::kCPU);
  at::Tensor t = adopt_cpu_result(std::move(value), index_of(device));
  Fill::account(t, s);
  return t;
}

// PyTorch's composite torch.arange is empty({0}) on the device, then the
// arange.start_out kernel, which grows that empty tensor: a device
// allocation, an alias and a storage swap for nothing. The real product runs
// that same out= kernel, so it is accounted exactly as that call would be
// (the out= argument keyed as the empty placeholder); the values are computed
// on the host and the memory adopted, charged once, as the grown tensor's.
at::Tensor arange(
    const c10::Scalar& start,
    const c10::Scalar& end,
    const c10::Scalar& step,
    std::optional<c10::ScalarType> dtype,
    std::optional<c10::Layout> layout,
    std::optional<c10::Device> device,
    std::optional<bool> pin_memory) {
  TORCH_CHECK(layout.value_or(c10::kStrided) == c10::kStrided,
              "neuron tensors support only the strided layout, got ", *layout);
  // The composite's dtype rule: integral arguments and no dtype give int64.
  const bool integral = !dtype.has_value() && start.isIntegral(true) && end.isIntegral(true) &&
      step.isIntegral(true);
  const auto type = integral ? at::kLong : c10::dtype_or_default(dtype);
  const auto index = index_of(device);
  at::Tensor out = at::detail::empty_cpu({0}, type, std::nullopt, std::nullopt, std::nullopt,
                                         std::nullopt);
  FastKernel<at::_ops::arange_start_out>::account(start, end, step, out);
  {
    HostPoolScope scope;
    at::cpu::arange_out(out, start, end, step);
  }
  if ((type == at::kLong || type == at::kDouble) && narrowing_mode() != 0 &&
      !(type == at::kLong && ends_fit_in_int32(out))) {
    narrow_64bit_inplace(out); // strict mode raises here, before anything is charged
  }
  return adopt_cpu_result(std::move(out), index);
}

at::Tensor arange_end(
    const c10::Scalar& end,
    std::optional<c10::ScalarType> dtype,
    std::optional<c10::Layout> layout,
    std::optional<c10::Device> device,
    std::optional<bool> pin_memory) {
  return arange(0, end, 1, dtype, layout, device, pin_memory);
}

at::Tensor arange_start(
    const c10::Scalar& start,
    const c10::Scalar& end,
    std::optional<c10::ScalarType> dtype,
    std::optional<c10::Layout> layout,
    std::optional<c10::Device> device,
    std::optional<bool> pin_memory) {
  return arange(start, end, 1, dtype, layout, device, pin_memory);
}

const at::Tensor& resize_(
    const at::Tensor& self,
    c10::SymIntArrayRef size,
    std::optional<c10::MemoryFormat> memory_format) {
  c10::DeviceGuard guard(self.device());
  return at::native::resize_(self, C10_AS_INTARRAYREF_SLOW(size), memory_format);
}

at::Tensor& set_storage(
    at::Tensor& self,
    c10::Storage source,
    int64_t storage_offset,
    c10::IntArrayRef size,
    c10::IntArrayRef stride) {
  c10::DeviceGuard guard(self.device());
  return at::native::set_storage_cpu_(self, source, storage_offset, size, stride);
}

at::Tensor& set_empty(at::Tensor& self) {
  c10::Storage empty(c10::Storage::use_byte_size_t(), 0, allocator(), true);
  return set_storage(self, empty, 0, {0}, {});
}

// Copies between host and device and between cores: plain memory copies on
// aliases (the real product's DMA), with conj/neg bits kept on the alias.
// A dtype change between two neuron tensors is a cast kernel on the device
// (TR python_ops/copy.py, Case C; host-side copies convert on the host): it
// fails for an FP8 format the instance refuses, and rounds stochastically
// when that is on (numerics/Precision.h).
at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  const bool device_cast = self.device().type() == kNeuron && dst.device().type() == kNeuron &&
      self.scalar_type() != dst.scalar_type();
  if (C10_UNLIKELY(device_cast && (dtype_refused(self.scalar_type()) || dtype_refused(dst.scalar_type())))) {
    raise_refused_dtype(dtype_refused(dst.scalar_type()) ? dst.scalar_type() : self.scalar_type(),
                        "aten::_to_copy");
  }
  LentCpuAlias dst_alias(dst);
  LentCpuAlias self_alias(self);
  if (C10_UNLIKELY(device_cast && stochastic_rounding_enabled() && self.is_floating_point() &&
                   is_narrow_float(dst.scalar_type()))) {
    (*dst_alias).copy_(round_stochastically(*self_alias, dst.scalar_type()));
    return dst;
  }
  const auto type = dst.scalar_type();
  if (dst.device().type() == kNeuron && narrowing_mode() == 2 &&
      (type == at::kLong || type == at::kDouble)) {
    // Strict 64-bit mode: check the converted values before they land, so a
    // copy that raises leaves the destination as it was.
    at::Tensor staged = at::empty_like(*dst_alias);
    staged.copy_(*self_alias);
    narrow_64bit_inplace(staged);
    (*dst_alias).copy_(staged);
    return dst;
  }
  (*dst_alias).copy_(*self_alias, non_blocking);
  if (dst.device().type() == kNeuron && narrowing_mode() != 0) {
    narrow_64bit_inplace(*dst_alias);
  }
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  dst.resize_(self.sizes());
  return copy_from(self, dst, false);
}

c10::Scalar local_scalar_dense(const at::Tensor& self) {
  return at::_local_scalar_dense(*LentCpuAlias(self));
}

// aten::convolution routes non-CPU/CUDA devices to these "overrideable" ops,
// which have no CPU kernel for the fallback to reuse.
at::Tensor convolution_overrideable(
    const at::Tensor& input, const at::Tensor& weight,
    const std::optional<at::Tensor>& bias, c10::IntArrayRef stride,
    c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
    c10::IntArrayRef output_padding, int64_t groups) {
  std::optional<at::Tensor> bias_alias;
  if (bias && bias->defined()) {
    bias_alias = cpu_alias(*bias);
  }
  auto out = at::convolution(cpu_alias(input), cpu_alias(weight), bias_alias,
                             stride, padding, dilation, transposed,
                             output_padding, groups);
  return adopt_cpu_tensor(out.contiguous(), input.device().index());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward_overrideable(
    const at::Tensor& grad_output, const at::Tensor& input,
    const at::Tensor& weight, c10::IntArrayRef stride, c10::IntArrayRef padding,
    c10::IntArrayRef dilation, bool transposed, c10::IntArrayRef output_padding,
    int64_t groups, std::array<bool, 3> output_mask) {
  const int64_t out_channels = transposed ? weight.size(1) * groups : weight.size(0);
  auto [gi, gw, gb] = at::convolution_backward(
      cpu_alias(grad_output), cpu_alias(input), cpu_alias(weight),
      std::vector<int64_t>{out_channels}, stride, padding,
      dilation, transposed, output_padding, groups, output_mask);
  const auto index = input.device().index();
  return std::make_tuple(adopt_cpu_tensor(gi, index), adopt_cpu_tensor(gw, index),
                         adopt_cpu_tensor(gb, index));
}

// Host-side waits are no-ops: kernels are synchronous.
void record_stream(at::Tensor&, c10::Stream) {}

// Module.to() keeps tied parameters (embeddings = LM head) tied only when the
// two tensors are "shallow-copy compatible"; c10 lists built-in backends
// only, so neuron must say that its dense tensors and CPU's are.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  auto dense = [](const at::Tensor& t) {
    return t.layout() == c10::kStrided &&
        (t.device().is_cpu() || t.device().type() == kNeuron);
  };
  return dense(self) && dense(from);
}

// Transformers' MoE layers count tokens per expert with histc on an integer
// tensor on every non-CPU device (CUDA accepts it); the CPU kernel takes only
// floating point, so integers are counted in float64 (exact for any count).
at::Tensor histc(const at::Tensor& self, int64_t bins, const at::Scalar& min,
                 const at::Scalar& max) {
  const at::Tensor alias = cpu_alias(self);
  at::Tensor counts = self.is_floating_point()
      ? at::histc(alias, bins, min, max)
      : at::histc(alias.to(at::kDouble), bins, min, max).to(self.scalar_type());
  return adopt_cpu_tensor(counts, self.device().index());
}

} // namespace torch_neuronx::native
