// 64-bit value narrowing: what Trainium does to int64/float64 values.
//
// Results and written arguments of int64/float64 dtype are scanned after each
// kernel (aten/native/Call.cpp) and after host-to-device copies; a value that
// changes in 32 bits is narrowed (warn once) or raises (strict).
#include "numerics/Narrowing.h"
#include "runtime/PerThread.h"

#include <atomic>
#include <cmath>

namespace torch_neuronx {
namespace {

std::atomic<int> g_narrowing{0};

// Formatting a tensor for print() computes float64 temporaries on the device;
// narrowing them would warn about values the user never had. Python suspends
// narrowing on the printing thread only (numerics/tensor_print.py).
thread_local int t_narrowing_suspended TORCH_NEURONX_FAST_TLS = 0;

// Whether any value of a contiguous int64/float64 tensor changes when kept
// in 32 bits (NaN stays NaN, infinities stay infinite).
bool changes_in_32_bits(const at::Tensor& t) {
  const int64_t n = t.numel();
  if (t.scalar_type() == at::kLong) {
    // A value fits when adding 2**31 leaves the high half zero. Or-ing those
    // halves has no branch, and blocks of a fixed length let the compiler
    // vectorize it (int64 results are scanned after every kernel: arange,
    // argmax, cumsum...); a value that does not fit still ends the scan at
    // the end of its block.
    const auto* values = reinterpret_cast<const uint64_t*>(t.const_data_ptr<int64_t>());
    auto high_half = [](uint64_t v) { return (v + (uint64_t{1} << 31)) >> 32; };
    constexpr int64_t kBlock = 64;
    int64_t i = 0;
    for (; i + kBlock <= n; i += kBlock) {
      uint64_t high = 0;
      for (int64_t j = 0; j < kBlock; ++j) {
        high |= high_half(values[i + j]);
      }
      if (high != 0) {
        return true;
      }
    }
    uint64_t high = 0;
    for (; i < n; ++i) {
      high |= high_half(values[i]);
    }
    return high != 0;
  }
  const double* values = t.const_data_ptr<double>();
  for (int64_t i = 0; i < n; ++i) {
    const double v = values[i];
    if (static_cast<double>(static_cast<float>(v)) != v && !std::isnan(v)) {
      return true;
    }
  }
  return false;
}

} // namespace

bool fits_in_32_bits(const at::Tensor& t) {
  const auto dtype = t.scalar_type();
  TORCH_INTERNAL_ASSERT(dtype == at::kLong || dtype == at::kDouble);
  return t.numel() == 0 || (t.is_contiguous() && !changes_in_32_bits(t));
}

int narrowing_mode() {
  return t_narrowing_suspended > 0 ? 0 : g_narrowing.load(std::memory_order_relaxed);
}

int configured_narrowing_mode() {
  return g_narrowing.load();
}

void set_narrowing_mode(int mode) {
  TORCH_CHECK(mode >= 0 && mode <= 2, "narrowing mode must be 0, 1 or 2");
  g_narrowing = mode;
}

void suspend_narrowing(bool suspend) {
  t_narrowing_suspended += suspend ? 1 : -1;
}

void narrow_64bit_inplace(const at::Tensor& t) {
  const auto dtype = t.scalar_type();
  if ((dtype != at::kLong && dtype != at::kDouble) || t.numel() == 0) {
    return;
  }
  // Scanned directly (a strided view is made dense first): reductions and
  // item() calls would cost more than most kernels whose results land here.
  if (!changes_in_32_bits(t.is_contiguous() ? t : t.contiguous())) {
    return;
  }
  TORCH_CHECK(
      narrowing_mode() != 2,
      "neuron: a ", c10::toString(dtype), " value does not fit in ",
      dtype == at::kLong ? "int32" : "float32",
      ", which is how Trainium stores it (TORCHNEURON_64BIT=strict). Keep "
      "values in range, or cast explicitly before moving to the device.");
  TORCH_WARN_ONCE(
      "neuron: Trainium has no 64-bit device dtypes; int64 values are kept as "
      "int32 (wrapping) and float64 as float32, and at least one value changed. "
      "Set TORCHNEURON_64BIT=strict to raise, or =off to keep 64-bit values.");
  // int64 wraps modulo 2**32, as int32 storage does.
  t.copy_(t.to(dtype == at::kLong ? at::kInt : at::kFloat));
}

} // namespace torch_neuronx
