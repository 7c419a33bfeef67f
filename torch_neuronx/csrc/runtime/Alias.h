// Zero-copy bridges between neuron memory and CPU tensors (Alias.cpp).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/MaybeOwned.h>

namespace torch_neuronx {

// A CPU tensor over the same bytes as the neuron tensor `t`; keeps `t`'s
// storage alive. Used by the fallback, the process group and compiled graphs.
at::Tensor cpu_alias(const at::Tensor& t);
// The same view without the reference: valid only while the caller keeps
// `t`'s storage alive and its memory in place (compiled graphs, GraphInputs.h).
at::Tensor unowned_cpu_alias(const at::Tensor& t);
// A CPU tensor with `t`'s layout on `alias_storage`, a CPU storage of `t`'s
// bytes: a new one (the aliases above and below), or another alias's, so
// that two arguments of one call viewing one neuron memory get one CPU
// storage and a kernel sees them overlap as CPU would (its memory-overlap
// checks, is_alias_of). Valid as that storage is.
at::Tensor cpu_alias_on(c10::Storage alias_storage, const at::Tensor& t);
// The view for one unboxed op call (the fast path, aten/native/FastPath.h):
// like unowned_cpu_alias, but the CPU tensor and storage objects are recycled
// from a per-thread pool instead of allocated, and lent without a reference
// (counting one up and down is two atomic operations per argument): its bit
// is set in `lent`, and return_call_cpu_aliases(lent) gives back every alias
// a call was lent. Valid while the caller keeps `t` alive; the kernel it is
// passed to must not keep it after returning. nullptr when every recycled
// alias is lent (the caller makes its own).
const at::Tensor* lend_call_cpu_alias(const at::Tensor& t, uint32_t& lent);
void return_call_cpu_aliases(uint32_t lent);
// A CPU view of `t` for a native kernel's own CPU call (copy_, item(), the
// SDPA choice): a recycled alias as above, given back when this goes out of
// scope; `t` itself when it is not a neuron tensor. A fresh owning alias per
// call was most of the ~130 CPU tensors a decode step made and freed. Same
// contract as lend_call_cpu_alias: `t` outlives this, and the CPU code it is
// passed to keeps no reference to it (nor sets requires_grad on it).
class LentCpuAlias {
 public:
  explicit LentCpuAlias(const at::Tensor& t);
  ~LentCpuAlias() {
    if (lent_ != 0) {
      return_call_cpu_aliases(lent_);
    }
  }
  LentCpuAlias(const LentCpuAlias&) = delete;
  LentCpuAlias& operator=(const LentCpuAlias&) = delete;
  const at::Tensor& operator*() const {
    return *alias_;
  }

 private:
  uint32_t lent_ = 0;
  c10::MaybeOwned<at::Tensor> alias_;
};
// The inverse: a neuron tensor taking ownership of a CPU tensor's storage.
at::Tensor adopt_cpu_tensor(const at::Tensor& cpu, c10::DeviceIndex index);
// The same for a tensor an ATen CPU kernel just returned: when the caller's
// handle (moved in) is its only reference, that tensor itself becomes the
// neuron tensor (no new tensor or storage objects); otherwise as
// adopt_cpu_tensor.
at::Tensor adopt_cpu_result(at::Tensor&& cpu, c10::DeviceIndex index);
// A new neuron storage of `index` holding the memory of a CPU storage nothing
// else references (which is left empty): an out= buffer a kernel grew.
c10::Storage take_cpu_memory(c10::StorageImpl& cpu, c10::DeviceIndex index);

} // namespace torch_neuronx
