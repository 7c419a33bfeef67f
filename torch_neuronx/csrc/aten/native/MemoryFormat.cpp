// The device's memory-format rule: contiguous layouts only.
//
// The real device supports only contiguous_format and preserve_format. The
// check sits on the user-facing ops (.contiguous(memory_format=),
// .to(memory_format=), empty_like) rather than in `empty`, which PyTorch's
// own kernels call with whatever layout they suggest for their outputs.
#include "aten/native/Native.h"

#include <ATen/ops/_to_copy_native.h>
#include <ATen/ops/clone_native.h>
#include <ATen/ops/empty_like_native.h>

namespace torch_neuronx::native {
namespace {

// The real product's message first (TR python_ops/cast_policy.py:38-51), then
// what to do about it.
void check_memory_format(const char* op, std::optional<c10::MemoryFormat> format) {
  const auto f = format.value_or(c10::MemoryFormat::Preserve);
  TORCH_CHECK(
      f == c10::MemoryFormat::Contiguous || f == c10::MemoryFormat::Preserve,
      op, ": Neuron tensors only support contiguous or preserve memory format; "
      "got memory format ", f, ". Trainium kernels are compiled for contiguous "
      "layouts: keep the default layout (torch.contiguous_format) instead of "
      "requesting ", f, ".");
}

} // namespace

at::Tensor clone(const at::Tensor& self, std::optional<c10::MemoryFormat> format) {
  check_memory_format("clone", format);
  return at::native::clone(self, format);
}

at::Tensor to_copy(
    const at::Tensor& self,
    std::optional<c10::ScalarType> dtype,
    std::optional<c10::Layout> layout,
    std::optional<c10::Device> device,
    std::optional<bool> pin_memory,
    bool non_blocking,
    std::optional<c10::MemoryFormat> format) {
  check_memory_format("_to_copy", format);
  return at::native::_to_copy(self, dtype, layout, device, pin_memory, non_blocking, format);
}

at::Tensor empty_like(
    const at::Tensor& self,
    std::optional<c10::ScalarType> dtype,
    std::optional<c10::Layout> layout,
    std::optional<c10::Device> device,
    std::optional<bool> pin_memory,
    std::optional<c10::MemoryFormat> format) {
  check_memory_format("empty_like", format);
  return at::native::empty_like(self, dtype, layout, device, pin_memory, format);
}

} // namespace torch_neuronx::native
