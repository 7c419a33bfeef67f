// Zero-copy bridges between neuron memory and CPU tensors.
//
// Neuron memory is host memory, so a CPU tensor can view it directly. The
// fallback, the process group and compiled graphs all run CPU code on these
// aliases; results that a CPU kernel allocated are adopted as neuron memory
// instead of being copied.
#include "runtime/Alias.h"
#include "runtime/Allocator.h"
#include "runtime/Device.h"
#include "runtime/PerThread.h"

#include <c10/core/CPUAllocator.h>

#include <array>

namespace torch_neuronx {

namespace {

// The tensor object of a CPU alias: a plain CPU tensor that takes its layout
// from the neuron tensor it aliases by copying, where set_sizes_and_strides
// would recompute the element count and six contiguity flags from the sizes
// and strides (for a 4-d tensor, four passes over them). The neuron tensor
// holds those already; a decode step re-points recycled aliases to new
// shapes hundreds of times, and the recomputation was ~73 k instructions of
// it.
class AliasImpl final : public c10::TensorImpl {
 public:
  using c10::TensorImpl::TensorImpl;

  void copy_layout(const c10::TensorImpl& source) {
    sizes_and_strides_.set_sizes(source.sizes());
    sizes_and_strides_.set_strides(source.strides());
    storage_offset_ = source.storage_offset();
    numel_ = source.numel();
    is_contiguous_ = source.is_contiguous(at::MemoryFormat::Contiguous);
    const int64_t dim = source.dim();
    if (dim == 4 || dim == 5) {
      is_channels_last_contiguous_ = source.is_contiguous(at::MemoryFormat::ChannelsLast);
      is_channels_last_3d_contiguous_ = source.is_contiguous(at::MemoryFormat::ChannelsLast3d);
      is_channels_last_ = source.is_strides_like(at::MemoryFormat::ChannelsLast);
      is_channels_last_3d_ = source.is_strides_like(at::MemoryFormat::ChannelsLast3d);
    } else {
      // PyTorch's own rule (TensorImpl::_refresh_contiguous): only 4-d and
      // 5-d tensors can be channels-last; asking was four out-of-line calls.
      is_channels_last_contiguous_ = false;
      is_channels_last_3d_contiguous_ = false;
      is_channels_last_ = false;
      is_channels_last_3d_ = false;
    }
    // A contiguous tensor is non-overlapping and dense by definition.
    is_non_overlapping_and_dense_ = is_contiguous_ || source.is_non_overlapping_and_dense();
  }
};

// A TensorImpl's dispatch keys, which only a member pointer formed through a
// derived class may reach (they are protected).
struct KeySetOf : c10::TensorImpl {
  static constexpr c10::DispatchKeySet c10::TensorImpl::*member = &KeySetOf::key_set_;
};

// What _change_backend_component_keys(neuron) makes of a CPU tensor's keys
// (the backend bit and its autocast keys swapped), as two constant masks:
// that function derives both from the device on every call, out of line,
// for each fresh result.
c10::DispatchKeySet neuron_keys_of_cpu(c10::DispatchKeySet keys) {
  using c10::BackendComponent;
  keys = (keys - c10::getAutocastRelatedKeySetFromBackend(BackendComponent::CPUBit)) |
      c10::getAutocastRelatedKeySetFromBackend(BackendComponent::PrivateUse1Bit);
  return keys.remove_backend(BackendComponent::CPUBit) |
      c10::DispatchKeySet(BackendComponent::PrivateUse1Bit);
}

// A CPU tensor with `t`'s layout over `data` (which points at `t`'s bytes).
at::Tensor cpu_view(const at::Tensor& t, c10::DataPtr data) {
  // Resizable with the CPU allocator: a kernel that grows an out= argument
  // gets fresh CPU memory, which the fallback notices and copies back.
  return cpu_alias_on(c10::Storage(c10::make_intrusive<c10::StorageImpl>(
                          c10::StorageImpl::use_byte_size_t(), t.storage().nbytes(),
                          std::move(data), c10::GetCPUAllocator(), /*resizable=*/true)),
                      t);
}

// Pointed at `t`'s bytes without a reference; fresh objects for every alias
// were a third of the fast path's own cost on a small op (two heap objects
// made and freed per argument). A tensor's search starts at the shell its
// layout (sizes, strides, offset, dtype) hashes to: most arguments of a
// decode step are fresh results in a few recurring layouts, which then find
// a shell needing only their bytes' address. Hashed by storage, as before,
// three lends in four re-copied a layout. A lent shell is marked, not
// referenced: its reference count stays 1 unless something else (a result
// viewing it) still holds it, which also keeps it out of use.
class AliasPool {
 public:
  const at::Tensor* lend(const at::Tensor& t, uint32_t& lent) {
    const c10::Storage& neuron = t.storage();
    const size_t home = home_of(*t.unsafeGetTensorImpl());
    for (size_t k = 0; k < kShells; ++k) {
      const size_t i = (home + k) % kShells;
      const uint32_t bit = uint32_t{1} << i;
      at::Tensor& shell = shells_[i];
      if ((lent_ & bit) != 0) {
        continue; // in use by a call still running (nested or listed twice)
      }
      if (!shell.defined()) {
        shell = unowned_cpu_alias(t);
      } else if (shell.use_count() == 1 && storage_of(shell).use_count() == 1) {
        repoint(shell, t, neuron);
      } else {
        continue; // held beyond its call
      }
      lent_ |= bit;
      lent |= bit;
      return &shell;
    }
    return nullptr; // more aliases alive at once than shells
  }

  void give_back(uint32_t lent) {
    lent_ &= ~lent;
  }

 private:
  static constexpr size_t kShells = 32; // one bit each in a lent mask

  // A shell is a plain CPU tensor we made: its storage needs no virtual call.
  static const c10::Storage& storage_of(const at::Tensor& shell) {
    return shell.unsafeGetTensorImpl()->unsafe_storage();
  }

  static size_t home_of(const c10::TensorImpl& t) {
    constexpr uint64_t kPrime = 0x100000001b3; // FNV-1a's
    uint64_t h = (static_cast<uint64_t>(t.storage_offset()) ^ static_cast<uint64_t>(t.dtype().toScalarType())) * kPrime;
    const auto sizes = t.sizes();
    const auto strides = t.strides();
    for (size_t i = 0; i < sizes.size(); ++i) {
      h = (h ^ static_cast<uint64_t>(sizes[i])) * kPrime;
      h = (h ^ static_cast<uint64_t>(strides[i])) * kPrime;
    }
    return (h >> 24) % kShells;
  }

  // Sizes, strides and offset; a tensor used again (weights, a loop's
  // operands) usually has the layout its shell last had.
  static bool same_layout(const c10::TensorImpl& a, const c10::TensorImpl& b) {
    const auto sizes = a.sizes();
    const auto other_sizes = b.sizes();
    if (sizes.size() != other_sizes.size() || a.storage_offset() != b.storage_offset()) {
      return false;
    }
    const auto strides = a.strides();
    const auto other_strides = b.strides();
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (sizes[i] != other_sizes[i] || strides[i] != other_strides[i]) {
        return false;
      }
    }
    return true;
  }

  static void repoint(at::Tensor& shell, const at::Tensor& t, const c10::Storage& neuron) {
    auto* impl = shell.unsafeGetTensorImpl();
    const auto* source = t.unsafeGetTensorImpl();
    auto* storage = storage_of(shell).unsafeGetStorageImpl();
    // A kernel that grew an out= argument left its own CPU memory here (never
    // at the neuron bytes' address); the non-owning pointer replacing it
    // frees that.
    if (storage->data() != neuron.data()) {
      storage->set_data_ptr_noswap(
          c10::DataPtr(neuron.mutable_data(), c10::Device(c10::DeviceType::CPU)));
    }
    if (storage->nbytes() != neuron.nbytes()) {
      storage->set_nbytes(neuron.nbytes());
    }
    if (impl->dtype() != source->dtype()) {
      impl->set_storage_and_dtype(storage_of(shell), source->dtype());
    }
    if (!same_layout(*impl, *source)) {
      static_cast<AliasImpl*>(impl)->copy_layout(*source); // every shell is one (cpu_view)
    }
    if (impl->is_conj() != source->is_conj()) {
      impl->_set_conj(source->is_conj());
    }
    if (impl->is_neg() != source->is_neg()) {
      impl->_set_neg(source->is_neg());
    }
  }

  std::array<at::Tensor, kShells> shells_;
  uint32_t lent_ = 0;
};

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

at::Tensor cpu_alias_on(c10::Storage alias_storage, const at::Tensor& t) {
  auto alias = at::detail::make_tensor<AliasImpl>(
      std::move(alias_storage), c10::DispatchKeySet(c10::DispatchKey::CPU), t.dtype());
  static_cast<AliasImpl*>(alias.unsafeGetTensorImpl())->copy_layout(*t.unsafeGetTensorImpl());
  if (t.is_conj()) {
    alias._set_conj(true);
  }
  if (t.is_neg()) {
    alias._set_neg(true);
  }
  return alias;
}

const at::Tensor* lend_call_cpu_alias(const at::Tensor& t, uint32_t& lent) {
  AliasPool* pool = PerThread<AliasPool>::get();
  return pool != nullptr ? pool->lend(t, lent) : nullptr;
}

void return_call_cpu_aliases(uint32_t lent) {
  if (AliasPool* pool = PerThread<AliasPool>::get()) { // lent on this thread
    pool->give_back(lent);
  }
}

LentCpuAlias::LentCpuAlias(const at::Tensor& t) {
  if (!is_neuron(t)) {
    alias_ = c10::MaybeOwned<at::Tensor>::borrowed(t);
  } else if (const at::Tensor* lent = lend_call_cpu_alias(t, lent_)) {
    alias_ = c10::MaybeOwned<at::Tensor>::borrowed(*lent);
  } else {
    alias_ = c10::MaybeOwned<at::Tensor>::owned(unowned_cpu_alias(t));
  }
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

at::Tensor adopt_cpu_result(at::Tensor&& cpu, c10::DeviceIndex index) {
  auto* impl = cpu.defined() ? cpu.unsafeGetTensorImpl() : nullptr;
  // Only a plain dense CPU tensor that nobody else can observe changes device
  // in place; anything else (shared, a wrapped number, extra dispatch keys
  // such as Python, conj or neg) is adopted through new objects.
  const bool sole = impl != nullptr && cpu.use_count() == 1 &&
      impl->device_type() == c10::DeviceType::CPU && impl->layout() == c10::kStrided &&
      !impl->is_wrapped_number() && !impl->is_conj() && !impl->is_neg() &&
      !impl->_is_zerotensor() && !impl->key_set().has(c10::DispatchKey::Python) &&
      !impl->has_symbolic_sizes_strides() && impl->allow_tensor_metadata_change();
  const c10::Storage* storage = sole ? &impl->storage() : nullptr;
  if (storage == nullptr || storage->use_count() != 1) {
    return adopt_cpu_tensor(cpu, index);
  }
  adopt_cpu_storage_in_place(*storage->unsafeGetStorageImpl(), index);
  // The tensor's cached device follows its storage when the storage is set
  // again: moved out and back, as a copy would count a reference up and down
  // (two atomic operations on every result).
  c10::Storage own = std::move(const_cast<c10::Storage&>(*storage));
  impl->set_storage_keep_dtype(std::move(own));
  TORCH_INTERNAL_ASSERT_DEBUG_ONLY(impl->key_set().highestBackendKey() == c10::BackendComponent::CPUBit);
  c10::DispatchKeySet& keys = impl->*KeySetOf::member;
  keys = neuron_keys_of_cpu(keys);
  return std::move(cpu);
}

c10::Storage take_cpu_memory(c10::StorageImpl& cpu, c10::DeviceIndex index) {
  auto storage = c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), cpu.nbytes(), std::move(cpu.mutable_data_ptr()),
      c10::GetCPUAllocator(), /*resizable=*/true);
  cpu.set_nbytes(0);
  adopt_cpu_storage_in_place(*storage, index);
  return c10::Storage(std::move(storage));
}

} // namespace torch_neuronx
