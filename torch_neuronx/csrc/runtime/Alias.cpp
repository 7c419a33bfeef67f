// Zero-copy bridges between neuron memory and CPU tensors.
//
// Neuron memory is host memory, so a CPU tensor can view it directly. The
// fallback, the process group and compiled graphs all run CPU code on these
// aliases; results that a CPU kernel allocated are adopted as neuron memory
// instead of being copied.
#include "runtime/Alias.h"
#include "runtime/Allocator.h"
#include "runtime/Device.h"

#include <c10/core/CPUAllocator.h>

namespace torch_neuronx {

namespace {

// A CPU tensor with `t`'s layout over `data` (which points at `t`'s bytes).
at::Tensor cpu_view(const at::Tensor& t, c10::DataPtr data) {
  // Resizable with the CPU allocator: a kernel that grows an out= argument
  // gets fresh CPU memory, which the fallback notices and copies back.
  auto impl = c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), t.storage().nbytes(), std::move(data),
      c10::GetCPUAllocator(), /*resizable=*/true);
  auto alias = at::detail::make_tensor<c10::TensorImpl>(
      c10::Storage(std::move(impl)), c10::DispatchKeySet(c10::DispatchKey::CPU),
      t.dtype());
  alias.unsafeGetTensorImpl()->set_sizes_and_strides(
      t.sizes(), t.strides(), t.storage_offset());
  if (t.is_conj()) {
    alias._set_conj(true);
  }
  if (t.is_neg()) {
    alias._set_neg(true);
  }
  return alias;
}

} // namespace

at::Tensor cpu_alias(const at::Tensor& t) {
  if (!is_neuron(t)) {
    return t;
  }
  const c10::Storage& storage = t.storage();
  // The alias owns a reference to the neuron storage, so the memory outlives
  // the alias even if the neuron tensor is freed first. The reference is
  // the DataPtr context itself (no extra heap object per alias).
  c10::StorageImpl* owner = storage.unsafeGetStorageImpl();
  c10::raw::intrusive_ptr::incref(owner);
  return cpu_view(t, c10::DataPtr(
      storage.mutable_data(), owner,
      [](void* ctx) { c10::raw::intrusive_ptr::decref(static_cast<c10::StorageImpl*>(ctx)); },
      c10::Device(c10::DeviceType::CPU)));
}

at::Tensor unowned_cpu_alias(const at::Tensor& t) {
  TORCH_INTERNAL_ASSERT(is_neuron(t), "unowned_cpu_alias: not a neuron tensor");
  return cpu_view(t, c10::DataPtr(t.storage().mutable_data(), c10::Device(c10::DeviceType::CPU)));
}

at::Tensor adopt_cpu_tensor(const at::Tensor& cpu, c10::DeviceIndex index) {
  if (!cpu.defined()) {
    return cpu;
  }
  const c10::Storage& storage = cpu.storage();
  auto impl = c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), storage.nbytes(),
      adopt_cpu_storage(storage, index), allocator(), /*resizable=*/true);
  auto out = at::detail::make_tensor<c10::TensorImpl>(
      c10::Storage(std::move(impl)),
      c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), cpu.dtype());
  out.unsafeGetTensorImpl()->set_sizes_and_strides(
      cpu.sizes(), cpu.strides(), cpu.storage_offset());
  return out;
}

} // namespace torch_neuronx
