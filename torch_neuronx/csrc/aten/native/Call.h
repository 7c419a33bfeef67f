// One neuron op running as a CPU kernel on zero-copy aliases.
//
// Shared by the boxed fallback (CpuFallback.cpp, every op) and the unboxed
// fast path (FastPath.h, the hottest ops): both alias the neuron
// arguments, check devices, run the CPU kernel, then bring written arguments
// and results back to the device the same way.
//
// The state records raw TensorImpl pointers of the caller's tensors, never
// copies: copying a tensor that Python owns moves its refcount from 1 to 2,
// which takes the GIL (PyObject preservation), a cost the fast path exists to
// avoid. The caller keeps the originals alive for the whole call.
#pragma once

#include "numerics/Narrowing.h"
#include "numerics/Precision.h"
#include "runtime/Alias.h"
#include "runtime/Device.h"

#include <ATen/core/operator_name.h>
#include <c10/util/MaybeOwned.h>
#include <c10/util/SmallVector.h>

namespace torch_neuronx {

// What a kernel may do to a tensor argument it is given.
enum class Access : uint8_t {
  kRead,
  // Change its values only, in the memory and layout it has: the self of an
  // ATen in-place op (add_, fill_, index_put_, ...; not a view op such as
  // squeeze_). Nothing comes back after the kernel, unless 64-bit values
  // need narrowing, so in-place ops pay for no written-argument record.
  kWriteValues,
  // Anything: new values, sizes, strides or memory (out=, resize_, set_).
  kWrite,
};

class CallState {
 public:
  // `aten_kernel`: the kernel is one of ATen's own CPU kernels (the fast
  // path): it keeps no argument after returning, so aliases come from the
  // per-thread pool (call_cpu_alias), and its results are fresh C++ tensors,
  // so a result nothing else holds becomes the neuron tensor in place
  // (adopt_cpu_result). Other kernels (the fallback's, possibly Python) get
  // aliases and results of their own.
  explicit CallState(bool aten_kernel = false) : aten_kernel_(aten_kernel) {}
  ~CallState() {
    if (lent_ != 0) {
      return_call_cpu_aliases(lent_);
    }
  }
  CallState(const CallState&) = delete;
  CallState& operator=(const CallState&) = delete;

  // A CPU alias of the neuron tensor `t` (which must outlive this state);
  // `access`: what the kernel may do to it. Borrowed (valid while this state
  // lives) when it is a recycled one.
  c10::MaybeOwned<at::Tensor> alias(const at::Tensor& t, Access access);
  // Record a device an argument asks for (e.g. a `device=` argument).
  // Inline, as check_devices' test: each call's own out-of-line function was
  // a cold instruction-cache line per op.
  void note_device(c10::Device d) {
    if (!device_) {
      device_ = d.index();
    } else if (C10_UNLIKELY(*device_ != d.index() && !other_device_)) {
      other_device_ = d;
    }
  }
  // A non-neuron tensor argument: only 0-dim CPU tensors may be mixed in.
  void note_other(const at::Tensor& t);
  // Raise PyTorch's usual mixed-device error, naming `op`, if devices were
  // mixed, or the compiler's if an argument has an FP8 format the instance
  // refuses (numerics/Precision.h).
  void check_devices(const c10::OperatorName& op) const {
    if (C10_UNLIKELY(other_device_ || (cpu_tensor_mixed_ && device_) ||
                     refused_ != at::ScalarType::Undefined)) {
      raise_call_error(op);
    }
  }
  std::optional<c10::DeviceIndex> device() const {
    return device_;
  }

  // After the kernel: make each written neuron argument reflect what the
  // kernel did to its alias (new size, new memory), and narrow 64-bit values.
  // In strict 64-bit mode a value out of range raises with every written
  // argument as it was before the call.
  void sync_written_args() {
    if (!written_.empty()) {
      sync_recorded_args();
    }
  }
  // Map one returned CPU tensor back to the device (moved in: a result
  // nothing else holds becomes the neuron tensor without a reference count
  // changing). The caller keeps the result alive until every result of the
  // call is mapped.
  at::Tensor to_neuron(at::Tensor&& out);
  // The precision transforms of this call (the fallback's, when they are on):
  // each fresh result is finished by them before it is adopted.
  void set_precision(const PrecisionCall* precision) {
    precision_ = precision;
  }

 private:
  struct WrittenArg {
    c10::TensorImpl* original;
    c10::MaybeOwned<at::Tensor> alias;
    c10::StorageImpl* alias_storage;
    void* alias_data;
    // Strict 64-bit mode only: the values before the kernel wrote them.
    at::Tensor before;
  };
  // The CPU storage of an earlier argument's alias that views `t`'s neuron
  // storage, or nullptr.
  const c10::Storage* earlier_alias_storage(const c10::TensorImpl& t) const;
  void sync_recorded_args();
  void restore_written_args();
  [[noreturn]] C10_NOINLINE void raise_call_error(const c10::OperatorName& op) const;

  bool aten_kernel_;
  std::optional<c10::DeviceIndex> device_;
  std::optional<c10::Device> other_device_; // first conflicting device seen
  bool cpu_tensor_mixed_ = false;
  at::ScalarType refused_ = at::ScalarType::Undefined; // an argument's refused FP8 format
  const PrecisionCall* precision_ = nullptr;
  size_t results_mapped_ = 0;
  // Inline storage: most ops have a handful of tensor arguments, and the hot
  // path should not touch the heap for bookkeeping.
  c10::SmallVector<std::pair<c10::TensorImpl*, c10::TensorImpl*>, 4> by_tensor_;
  c10::SmallVector<std::pair<c10::StorageImpl*, c10::TensorImpl*>, 4> by_storage_;
  c10::SmallVector<WrittenArg, 2> written_;
  uint32_t lent_ = 0; // recycled aliases (Alias.h), given back at the end
  // Results already adopted, so a second result viewing the same fresh memory
  // (e.g. a tuple of views of one buffer) becomes a view, not a second owner.
  // Unowned: the caller holds every mapped result until the call returns.
  c10::SmallVector<std::pair<c10::StorageImpl*, c10::TensorImpl*>, 2> adopted_;
};

} // namespace torch_neuronx
