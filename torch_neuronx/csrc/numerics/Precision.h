// The chip's precision rules that change what a kernel computes
// (Precision.cpp): stochastic rounding of every narrow result, the compiler's
// auto-cast of FP32 operations, and the FP8 formats an instance refuses.
//
// All of it is off by default, and a call pays one relaxed load to learn so:
// the fast path hands its calls to the boxed fallback while a transform is
// on, and the fallback runs them through a PrecisionCall.
#pragma once

#include "numerics/Rounding.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/util/SmallVector.h>

#include <string>
#include <vector>

namespace torch_neuronx {

// neuronx-cc --auto-cast: which FP32 operations compute in the auto-cast type.
enum class AutoCast : uint8_t { kNone = 0, kMatmult = 1, kAll = 2 };

namespace detail {
extern std::atomic<bool> g_transforms;
extern uint64_t g_refused_dtypes; // bit per ScalarType; written only while configuring
} // namespace detail

// Whether calls go through PrecisionCall (stochastic rounding or an auto-cast on).
inline bool precision_transforms_active() {
  return detail::g_transforms.load(std::memory_order_relaxed);
}
void set_auto_cast(AutoCast mode, CastType type);
// Stochastic rounding on or off (Rounding.h), with the transforms it needs.
void configure_stochastic_rounding(bool enabled, uint64_t seed);
// Ops that run on TensorE (the ones --auto-cast matmult casts), as
// "aten::name" or "aten::name.overload".
void set_tensor_engine_ops(const std::vector<std::string>& names);
// Ops whose narrow results stayed rounded to nearest under stochastic
// rounding: no meta kernel told their result dtypes.
std::vector<std::string> unrounded_ops();

// The FP8 formats the selected instance refuses, each with the message a
// kernel touching it fails with.
void set_refused_dtypes(const std::vector<std::pair<at::ScalarType, std::string>>& refused);
inline bool dtype_refused(at::ScalarType dtype) {
  return ((detail::g_refused_dtypes >> static_cast<int>(dtype)) & 1u) != 0;
}
[[noreturn]] void raise_refused_dtype(at::ScalarType dtype, const std::string& op);
// Whether MX block-scaled matmuls run (NeuronCore-v4), and the message otherwise.
void set_mx_support(bool supported, std::string refusal);
void check_mx_supported(const std::string& op);

// One boxed call under the transforms: built on the caller's arguments (still
// neuron tensors), it swaps the CPU aliases of the arguments it transforms for
// FP32 copies before the kernel and rounds what the kernel wrote and returned
// afterwards.
class PrecisionCall {
 public:
  PrecisionCall(const c10::OperatorHandle& op, const torch::jit::Stack& stack, size_t begin);
  bool active() const {
    return !slots_.empty() || auto_cast_all_;
  }
  // After the arguments were aliased and accounted, before the kernel.
  void before_run(torch::jit::Stack& stack);
  // After the kernel: written copies rounded back into their aliases, and a
  // returned copy replaced by its alias (so it maps back to the argument).
  void after_run(torch::jit::Stack& stack, size_t num_returns);
  // A fresh result (`index`: its position among the call's tensor results)
  // in the dtype and precision the device writes it.
  at::Tensor finish_result(at::Tensor&& result, size_t index) const;

 private:
  enum class Kind : uint8_t { kWiden, kAutoCast };
  struct Slot {
    size_t position;
    int64_t element; // index in a tensor list, -1 for a tensor argument
    at::ScalarType dtype;
    Kind kind;
    bool written;
    at::Tensor alias;
    at::Tensor copy;
  };
  at::Tensor rounded(const Slot& slot) const;

  const c10::OperatorHandle& op_;
  size_t begin_;
  bool stochastic_;
  bool auto_cast_all_ = false;
  CastType cast_type_;
  c10::SmallVector<Slot, 4> slots_;
  std::vector<at::ScalarType> result_dtypes_; // what the kernel would return without widening
};

} // namespace torch_neuronx
