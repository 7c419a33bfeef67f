// Route table: ops with a native neuron kernel (kernels in native/Kernels.cpp).
//
// Factories allocate on the right core, views share the neuron storage itself
// (PyTorch's device-generic view kernels, since neuron memory is host
// memory), and copies are where host<->device transfers happen.
#include "aten/Routes.h"
#include "aten/native/Native.h"

#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <torch/library.h>

namespace torch_neuronx {

std::vector<std::string> ops_accounted_as_composite() {
  // Registered below: each computes on the host but accounts the kernels of the
  // composite it replaces (empty + fill_, empty + arange.start_out; Kernels.cpp).
  return {"scalar_tensor", "arange", "arange.start", "arange.start_step"};
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  // memory and metadata
  m.impl("empty.memory_format", native::empty_memory_format);
  m.impl("empty_strided", native::empty_strided);
  m.impl("scalar_tensor", native::scalar_tensor);
  m.impl("arange", native::arange_end);
  m.impl("arange.start", native::arange_start);
  m.impl("arange.start_step", native::arange);
  m.impl("resize_", native::resize_);
  m.impl("set_.source_Storage_storage_offset", native::set_storage);
  m.impl("set_.source_Storage", at::native::set_);
  m.impl("set_.source_Tensor", at::native::set_tensor_);
  m.impl("set_", native::set_empty);
  m.impl("record_stream", native::record_stream);
  m.impl("_has_compatible_shallow_copy_type", native::has_compatible_shallow_copy_type);
  // views
  m.impl("as_strided", at::native::as_strided_tensorimpl);
  m.impl("view", at::native::view);
  m.impl("_reshape_alias", at::native::_reshape_alias);
  m.impl("view_as_real", at::native::view_as_real);
  m.impl("view_as_complex", at::native::view_as_complex);
  // copies
  m.impl("_copy_from", native::copy_from);
  m.impl("_copy_from_and_resize", native::copy_from_and_resize);
  m.impl("_local_scalar_dense", native::local_scalar_dense);
  // no CPU kernel the fallback could reuse
  m.impl("convolution_overrideable", native::convolution_overrideable);
  m.impl("convolution_backward_overrideable", native::convolution_backward_overrideable);
  m.impl("histc", native::histc);
}

// conj/neg bits travel into _copy_from on the alias instead of being
// materialized by a clone(), which would recurse into _copy_from forever.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
}
TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
}

} // namespace torch_neuronx
