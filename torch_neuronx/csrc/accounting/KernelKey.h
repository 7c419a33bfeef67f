// The eager kernel key (KernelKey.cpp): what makes two calls one compiled
// kernel on the real product (TR torch_neuronx/kernels/base.py:103-160; the
// policy table is torch_neuronx/accounting/kernel_key.py).
//
// Key = op overload + per argument: tensors by shape and dtype (0-dim CPU
// tensors too; strides are not part of it), the arguments the op declares
// static by value, every other scalar (int, float, bool, complex, string)
// by its type only, None by its own tag, lists element by element; the
// compiler configuration is salted in by Accounting.cpp. Both the boxed
// fallback (from IValues) and the unboxed fast path (from typed arguments)
// feed a KeyBuilder, so the same call gets the same key on either path.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/function_schema.h>
#include <c10/util/SmallVector.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace torch_neuronx {

class KeyBuilder {
 public:
  static constexpr uint64_t kSeed = 0x51ed270b;

  // `is_out`: an out= argument, keyed by shape and dtype like any tensor but
  // not an input (it may be an empty placeholder the kernel resizes).
  void tensor(const at::Tensor& t, bool is_out = false);
  void value(const c10::IValue& v, bool is_static, bool is_out = false);
  void integer(int64_t v, bool is_static);
  // A Scalar as boxing would key it (double, int, bool or complex), without
  // the IValue: the fast path's scalars (`alpha`, `other`, fill values).
  void scalar(const c10::Scalar& s, bool is_static);
  void none();

  uint64_t hash() const {
    return hash_;
  }
  // An input with no elements: the real product runs no kernel at all.
  bool has_empty_tensor() const {
    return has_empty_;
  }
  // Strided inputs, each of which makes the real product compile and run its
  // contiguity kernel first. Pointers into the caller's arguments.
  const c10::SmallVector<const at::Tensor*, 2>& non_contiguous() const {
    return non_contiguous_;
  }

 private:
  void floating(double v, bool is_static);
  void boolean(bool v, bool is_static);
  void complex(c10::complex<double> v, bool is_static);

  uint64_t hash_ = kSeed;
  bool has_empty_ = false;
  c10::SmallVector<const at::Tensor*, 2> non_contiguous_;
};

// Bit i set: argument i of `schema` (first 64 arguments) is static, or an
// out= argument (keyword-only and written). Cached per schema and thread;
// recomputed after set_static_arguments.
struct ArgumentMasks {
  uint64_t is_static = 0;
  uint64_t is_out = 0;
};
ArgumentMasks argument_masks(const c10::FunctionSchema& schema);
// Rows of (op pattern, argument name); see kernel_key.py for the patterns.
void set_static_arguments(std::vector<std::pair<std::string, std::string>> rows);

} // namespace torch_neuronx
