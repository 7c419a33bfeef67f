// Running a compiled graph's CPU code on device memory, call after call.
//
// A compiled decode step takes every parameter and every static-cache tensor
// as an input: building a CPU alias of each on every call (a StorageImpl, a
// TensorImpl and a Python object apiece) made a compiled step cost as much
// as an eager one. These are the same tensors on every call, so each input
// position keeps its alias and reuses it while the position holds the same
// storage (same object, same memory, same size) with the same layout. A
// reallocated parameter (`p.data = ...`, `set_`, a resize) fails the check
// and gets a fresh alias; memory freed and reallocated at the same address
// is a new StorageImpl, which the weak reference tells apart.
//
// The cached aliases do not own the memory they view (an owning alias would
// keep a deleted model's weights on the device for as long as the compiled
// graph lives): the GraphCall of each run holds the neuron inputs instead,
// until their results are mapped back.
#include "runtime/GraphInputs.h"
#include "runtime/Alias.h"
#include "runtime/Device.h"

#include <atomic>

namespace torch_neuronx {
namespace {

std::atomic<uint64_t> g_built{0};
std::atomic<uint64_t> g_reused{0};

bool same_layout(const at::Tensor& alias, const at::Tensor& t) {
  const c10::StorageImpl& storage = *t.storage().unsafeGetStorageImpl();
  return alias.storage().data() == storage.data() &&
      alias.storage().nbytes() == storage.nbytes() && alias.dtype() == t.dtype() &&
      alias.sizes() == t.sizes() && alias.strides() == t.strides() &&
      alias.storage_offset() == t.storage_offset() && alias.is_conj() == t.is_conj() &&
      alias.is_neg() == t.is_neg();
}

// A neuron tensor over `base`'s memory with `out`'s dtype and layout.
at::Tensor reinterpret(const at::Tensor& base, const at::Tensor& out) {
  auto view = at::detail::make_tensor<c10::TensorImpl>(
      c10::Storage(base.storage()), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
      out.dtype());
  view.unsafeGetTensorImpl()->set_sizes_and_strides(
      out.sizes(), out.strides(), out.storage_offset());
  return view;
}

const void* memory_of(const at::Tensor& t) {
  return t.storage().nbytes() > 0 ? t.storage().data() : nullptr;
}

} // namespace

GraphInputs::GraphInputs(std::vector<std::optional<c10::Device>> devices)
    : devices_(std::make_shared<const std::vector<std::optional<c10::Device>>>(
          std::move(devices))) {}

std::vector<at::Tensor> GraphInputs::alias(
    const std::vector<at::Tensor>& inputs, GraphCall& call) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (slots_.size() < inputs.size()) {
    slots_.resize(inputs.size());
  }
  std::vector<at::Tensor> aliases;
  aliases.reserve(inputs.size());
  uint64_t built = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const at::Tensor& t = inputs[i];
    if (!t.defined() || !is_neuron(t)) {
      aliases.push_back(t);
      continue;
    }
    if (memory_of(t) != nullptr) {
      call.inputs_.push_back(t);
    }
    Slot& slot = slots_[i];
    // The weak reference keeps the StorageImpl object allocated, so an equal
    // pointer is the same storage, never a new one at a recycled address.
    if (!slot.storage ||
        slot.storage->_unsafe_get_target() != t.storage().unsafeGetStorageImpl() ||
        !same_layout(slot.alias, t)) {
      slot.storage.emplace(t.storage().getWeakStorageImpl());
      slot.alias = unowned_cpu_alias(t);
      ++built;
    }
    aliases.push_back(slot.alias);
  }
  g_built += built;
  g_reused += aliases.size() - built;
  return aliases;
}

const at::Tensor* GraphCall::base_of(const at::Tensor& out) const {
  const void* memory = memory_of(out);
  if (memory == nullptr) {
    return nullptr;
  }
  for (const auto* tensors : {&inputs_, &adopted_}) {
    for (const auto& t : *tensors) {
      if (t.storage().data() == memory) {
        return &t;
      }
    }
  }
  return nullptr;
}

at::Tensor GraphCall::result(size_t i, const at::Tensor& out) {
  const auto& device = (*devices_)[i];
  if (!out.defined() || !device) {
    return out;
  }
  const at::Tensor* base = base_of(out);
  if (device->type() != kNeuron) {
    // A CPU result must never alias device memory (`x.cpu()` copies).
    return base != nullptr ? out.clone() : out;
  }
  if (base != nullptr) {
    return base->dtype() == out.dtype()
        ? base->as_strided(out.sizes(), out.strides(), out.storage_offset())
        : reinterpret(*base, out);
  }
  at::Tensor adopted = adopt_cpu_tensor(out, device->has_index() ? device->index() : 0);
  if (memory_of(out) != nullptr) {
    adopted_.push_back(adopted);
  }
  return adopted;
}

std::pair<uint64_t, uint64_t> graph_input_alias_counts(bool reset) {
  if (reset) {
    return {g_built.exchange(0), g_reused.exchange(0)};
  }
  return {g_built.load(), g_reused.load()};
}

} // namespace torch_neuronx
