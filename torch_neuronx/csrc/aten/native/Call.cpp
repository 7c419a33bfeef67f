// Aliasing, device checks and result mapping of one op call (see Call.h).
#include "aten/native/Call.h"
#include "runtime/Allocator.h"

#include <ATen/ops/empty_strided.h>
#include <ATen/ops/zeros.h>

#include <cstring>

namespace torch_neuronx {
namespace {

// A new owning reference to a tensor we only hold by pointer.
at::Tensor retain(c10::TensorImpl* impl) {
  return at::Tensor(c10::intrusive_ptr<c10::TensorImpl>::reclaim_copy(impl));
}

// Only int64/float64 values can need narrowing; checking the dtype first
// spares every other result an alias.
bool needs_narrowing(const caffe2::TypeMeta dtype) {
  const auto type = dtype.toScalarType();
  return (type == at::kLong || type == at::kDouble) && narrowing_mode() != 0;
}

} // namespace

void CallState::note_other(const at::Tensor& t) {
  cpu_tensor_mixed_ |= t.defined() && t.device().is_cpu() && t.dim() > 0;
}

const c10::Storage* CallState::earlier_alias_storage(const c10::TensorImpl& t) const {
  const auto* neuron = t.unsafe_storage().unsafeGetStorageImpl();
  for (const auto& [alias_impl, original] : by_tensor_) {
    if (original->unsafe_storage().unsafeGetStorageImpl() == neuron) {
      return &alias_impl->unsafe_storage();
    }
  }
  return nullptr;
}

c10::MaybeOwned<at::Tensor> CallState::alias(const at::Tensor& t, Access access) {
  note_device(t.device());
  if (C10_UNLIKELY(dtype_refused(t.scalar_type()))) {
    refused_ = t.scalar_type();
  }
  // Another argument of this call views the same neuron memory (x[:2].add_(x[1:3]),
  // x.add_(x)): this alias shares its CPU storage, so the kernel's overlap
  // checks see what they would see on CPU. Rare; the first argument skips the search.
  const c10::Storage* shared =
      by_tensor_.empty() ? nullptr : earlier_alias_storage(*t.unsafeGetTensorImpl());
  const at::Tensor* lent =
      aten_kernel_ && shared == nullptr ? lend_call_cpu_alias(t, lent_) : nullptr;
  c10::MaybeOwned<at::Tensor> a;
  if (shared != nullptr) {
    a = c10::MaybeOwned<at::Tensor>::owned(cpu_alias_on(*shared, t));
  } else if (lent != nullptr) {
    a = c10::MaybeOwned<at::Tensor>::borrowed(*lent);
  } else {
    a = c10::MaybeOwned<at::Tensor>::owned(aten_kernel_ ? unowned_cpu_alias(t) : cpu_alias(t));
  }
  // An alias is a plain CPU tensor made here: its storage needs no virtual call.
  auto* storage = a->unsafeGetTensorImpl()->unsafe_storage().unsafeGetStorageImpl();
  by_tensor_.emplace_back(a->unsafeGetTensorImpl(), t.unsafeGetTensorImpl());
  by_storage_.emplace_back(storage, t.unsafeGetTensorImpl());
  if (access == Access::kWrite ||
      (access == Access::kWriteValues && needs_narrowing(t.unsafeGetTensorImpl()->dtype()))) {
    // A strict-mode failure must lose nothing: keep what a 64-bit argument
    // held (a copy, paid only in strict mode and only for in-place/out= ops).
    const auto type = t.scalar_type();
    const bool keep = narrowing_mode() == 2 && (type == at::kLong || type == at::kDouble);
    written_.push_back({t.unsafeGetTensorImpl(), a, storage, storage->mutable_data(),
                        keep ? a->clone() : at::Tensor()});
  }
  return a;
}

void CallState::raise_call_error(const c10::OperatorName& op) const {
  if (refused_ != at::ScalarType::Undefined && !other_device_ && !(cpu_tensor_mixed_ && device_)) {
    raise_refused_dtype(refused_, op.overload_name.empty() ? op.name : op.name + "." + op.overload_name);
  }
  TORCH_CHECK(
      false,
      "Expected all tensors to be on the same device, but found at least two "
      "devices, neuron:", static_cast<int>(device_.value_or(0)), " and ",
      other_device_ ? other_device_->str() : std::string("cpu"),
      "! (while running ", op, " on the neuron device)");
}

at::Tensor CallState::to_neuron(at::Tensor&& out) {
  const size_t result_index = precision_ != nullptr ? results_mapped_++ : 0;
  if (!out.defined()) {
    return out;
  }
  const auto index = device_ ? *device_ : current_device();
  if (out._is_zerotensor()) {
    // Autograd's efficient zero tensors (e.g. the gradient of sign/round)
    // have no memory behind their shape: give the device real zeros.
    c10::DeviceGuard guard(c10::Device(kNeuron, index));
    return at::zeros(out.sizes(), out.options().device(kNeuron, index));
  }
  auto* impl = out.unsafeGetTensorImpl();
  for (auto& [alias_impl, original] : by_tensor_) {
    if (alias_impl == impl) {
      return retain(original);
    }
  }
  const c10::Storage& out_storage = out.storage();
  auto* storage = out_storage.unsafeGetStorageImpl();
  const c10::Storage* base = nullptr;
  for (auto& [alias_storage, original] : by_storage_) {
    if (alias_storage == storage) {
      base = &original->storage();
      break;
    }
  }
  if (base == nullptr) {
    for (auto& [adopted_storage, neuron] : adopted_) {
      if (adopted_storage == storage) {
        base = &neuron->storage();
        break;
      }
    }
  }
  if (base != nullptr) {
    // A view of memory that already lives on the device.
    auto view = at::detail::make_tensor<c10::TensorImpl>(
        c10::Storage(*base), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
        out.dtype());
    view.unsafeGetTensorImpl()->set_sizes_and_strides(
        out.sizes(), out.strides(), out.storage_offset());
    return view;
  }
  if (C10_UNLIKELY(precision_ != nullptr)) {
    out = precision_->finish_result(std::move(out), result_index);
    storage = out.storage().unsafeGetStorageImpl();
  }
  at::Tensor result;
  if (out.storage().use_count() > 1) {
    // Memory the kernel shares with something else: copy, never steal.
    c10::DeviceGuard guard(c10::Device(kNeuron, index));
    result = at::empty_strided(out.sizes(), out.strides(),
                               out.options().device(kNeuron, index));
    cpu_alias(result).copy_(out);
  } else {
    result = aten_kernel_ ? adopt_cpu_result(std::move(out), index) : adopt_cpu_tensor(out, index);
    adopted_.emplace_back(storage, result.unsafeGetTensorImpl());
  }
  if (needs_narrowing(result.dtype()) && !fits_in_32_bits(result)) {
    narrow_64bit_inplace(cpu_alias(result));
  }
  return result;
}

void CallState::restore_written_args() {
  for (auto& w : written_) {
    // Memory the kernel moved to a fresh buffer was never written; the
    // original still holds its old values.
    const bool moved = w.alias->storage().unsafeGetStorageImpl() != w.alias_storage ||
        w.alias->storage().mutable_data() != w.alias_data;
    if (w.before.defined() && !moved) {
      cpu_alias(retain(w.original)).copy_(w.before);
    }
  }
}

void CallState::sync_recorded_args() {
  for (auto& w : written_) {
    if (w.before.defined()) {
      try {
        // Raises in strict mode before changing anything; narrows nothing
        // here (narrow mode keeps no copy).
        narrow_64bit_inplace(*w.alias);
      } catch (...) {
        restore_written_args();
        throw;
      }
    }
  }
  for (auto& w : written_) {
    const at::Tensor& alias = *w.alias;
    auto* original = w.original;
    const bool moved = alias.storage().unsafeGetStorageImpl() != w.alias_storage ||
        alias.storage().mutable_data() != w.alias_data;
    if (moved) {
      // The kernel gave an out= argument new memory (resize, or set_ to a
      // buffer it laid out itself, e.g. LAPACK's padded column-major
      // results). Give the neuron tensor device memory of the same size and
      // layout: the alias's strides and offset may reach beyond numel().
      const auto& fresh = alias.storage();
      c10::DeviceGuard guard(original->device());
      if (aten_kernel_ && fresh.use_count() == 1) {
        // An ATen kernel's own buffer that nothing else holds (arange's
        // out=, grown from empty): the device takes the memory itself, and
        // the tensor its new storage as set_ would give it.
        original->set_storage_keep_dtype(take_cpu_memory(
            *fresh.unsafeGetStorageImpl(), original->device().index()));
        original->set_sizes_and_strides(alias.sizes(), alias.strides(), alias.storage_offset());
      } else {
        c10::Storage storage(c10::Storage::use_byte_size_t(), fresh.nbytes(), allocator(),
                             /*resizable=*/true);
        if (fresh.nbytes() > 0) {
          std::memcpy(storage.mutable_data(), fresh.data(), fresh.nbytes());
        }
        retain(original).set_(storage, alias.storage_offset(), alias.sizes(), alias.strides());
      }
    } else if (alias.sizes() != original->sizes() ||
               alias.strides() != original->strides() ||
               alias.storage_offset() != original->storage_offset()) {
      original->set_sizes_and_strides(
          alias.sizes(), alias.strides(), alias.storage_offset());
    }
    if (needs_narrowing(original->dtype()) && !w.before.defined()) {
      narrow_64bit_inplace(moved ? cpu_alias(retain(original)) : alias);
    }
  }
}

} // namespace torch_neuronx
