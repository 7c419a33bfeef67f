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
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace torch_neuronx {

// One value into a running hash (boost's combine). The kernel key and the
// signature hash built on it share it: the persistent cache's hex keys
// depend on this exact formula.
inline void mix_hash(uint64_t& h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
}

// The per-argument steps are defined here, in the header, so that each
// op's key can inline them: the fast path keys every call. GCC (-O2) inlines
// the small ones; `tensor` and `scalar` stay one out-of-line call each. When
// every step was an out-of-line call, and `tensor` asked TensorImpl's own
// out-of-line contiguity switch, those calls were a third of the key's cost.
class KeyBuilder {
 public:
  static constexpr uint64_t kSeed = 0x51ed270b;

  // Tags for what goes into the key by type only.
  enum Tag : uint64_t {
    kUndefinedTensor = 0xdead,
    kNone = 7,
    kInt = 11,
    kFloat = 13,
    kBool = 17,
    kComplex = 19,
    kString = 23,
  };

  // `is_out`: an out= argument, keyed by shape and dtype like any tensor but
  // not an input (it may be an empty placeholder the kernel resizes).
  void tensor(const at::Tensor& t, bool is_out = false) {
    if (!t.defined()) {
      mix(kUndefinedTensor);
      return;
    }
    // One read of each field, on every call of every kernel.
    const c10::TensorImpl& impl = *t.unsafeGetTensorImpl();
    const c10::IntArrayRef sizes = impl.sizes();
    mix(static_cast<uint64_t>(impl.dtype().toScalarType()));
    mix(static_cast<uint64_t>(sizes.size()));
    for (auto s : sizes) {
      mix(static_cast<uint64_t>(s));
    }
    if (is_out) {
      return;
    }
    if (impl.numel() == 0) {
      has_empty_ = true;
    } else if (!impl.is_contiguous(at::MemoryFormat::Contiguous)) {
      non_contiguous_.push_back(&t);
    }
  }
  void value(const c10::IValue& v, bool is_static, bool is_out = false);
  void integer(int64_t v, bool is_static) {
    mix(is_static ? static_cast<uint64_t>(v) : kInt);
  }
  // A Scalar as boxing would key it (double, int, bool or complex), without
  // the IValue: the fast path's scalars (`alpha`, `other`, fill values).
  void scalar(const c10::Scalar& s, bool is_static) {
    if (s.isSymbolic()) {
      value(c10::IValue(s), is_static); // as boxing: a SymInt/SymFloat IValue
    } else if (s.isFloatingPoint()) {
      floating(s.toDouble(), is_static);
    } else if (s.isBoolean()) {
      boolean(s.toBool(), is_static);
    } else if (s.isComplex()) {
      complex(s.toComplexDouble(), is_static);
    } else {
      integer(s.toLong(), is_static);
    }
  }
  void none() {
    mix(kNone);
  }

  uint64_t hash() const {
    return hash_;
  }
  // An input with no elements: the real product runs no kernel at all.
  bool has_empty_tensor() const {
    return has_empty_;
  }
  // Nothing but the call's own kernel to account: no empty input, no strided one.
  bool plain() const {
    return !has_empty_ && non_contiguous_.empty();
  }
  // Strided inputs, each of which makes the real product compile and run its
  // contiguity kernel first. Pointers into the caller's arguments.
  const c10::SmallVector<const at::Tensor*, 2>& non_contiguous() const {
    return non_contiguous_;
  }

 private:
  void mix(uint64_t v) {
    mix_hash(hash_, v);
  }
  static uint64_t bits_of(double d) {
    uint64_t bits;
    std::memcpy(&bits, &d, sizeof bits);
    return bits;
  }
  void floating(double v, bool is_static) {
    mix(is_static ? bits_of(v) : kFloat);
  }
  void boolean(bool v, bool is_static) {
    mix(is_static ? (v ? 3 : 5) : kBool);
  }
  void complex(c10::complex<double> v, bool is_static) {
    if (is_static) {
      mix(bits_of(v.real()));
      mix(bits_of(v.imag()));
    } else {
      mix(kComplex);
    }
  }

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
// How many masks were computed (cache misses, all threads) since the process began.
uint64_t argument_mask_computations();
// Rows of (op pattern, argument name); see kernel_key.py for the patterns.
void set_static_arguments(std::vector<std::pair<std::string, std::string>> rows);

} // namespace torch_neuronx
