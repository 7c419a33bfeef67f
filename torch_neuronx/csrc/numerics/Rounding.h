// How the chip rounds a value to a narrower float format (Rounding.cpp).
//
// NeuronCores compute in FP32 and round when they write a narrower format.
// The default is round-to-nearest-even, as on the host; with the runtime's
// NEURON_RT_STOCHASTIC_ROUNDING_EN=1 every such rounding is stochastic: a value
// goes to the next representable value above or below with probabilities
// proportional to its distance from each, drawn from a generator seeded by
// NEURON_RT_STOCHASTIC_ROUNDING_SEED (Neuron docs, "Neuron Rounding Modes").
#pragma once

#include <ATen/core/Tensor.h>

#include <atomic>
#include <cstdint>
#include <optional>

namespace torch_neuronx {

// A float format by its precision and range: enough to round a float32 value
// to it. Torch dtypes have one each; tf32 and the chip's IEEE-style fp8 e4m3
// (compiler auto-cast types) have none.
struct FloatFormat {
  int mantissa_bits;
  int min_exponent; // of the smallest normal value
  float max_finite;
  bool has_inf; // overflow gives inf; otherwise NaN (the "fn" fp8 formats)
};

// The compiler's --auto-cast-type values, in the order Python passes them.
enum class CastType : uint8_t { kBF16 = 0, kFP16 = 1, kTF32 = 2, kFP8E4M3 = 3 };

std::optional<FloatFormat> float_format(at::ScalarType dtype);
FloatFormat cast_type_format(CastType type);
// bf16, fp16 and the fp8 formats: the dtypes a write from FP32 rounds to.
bool is_narrow_float(at::ScalarType dtype);

namespace detail {
extern std::atomic<bool> g_stochastic_rounding;
} // namespace detail

// Whether roundings are stochastic (one relaxed load: checked on every call).
inline bool stochastic_rounding_enabled() {
  return detail::g_stochastic_rounding.load(std::memory_order_relaxed);
}
// Turns stochastic rounding on or off; the generator restarts from `seed`, so
// the same ops give the same values for the same seed.
void set_stochastic_rounding(bool enabled, uint64_t seed);
uint64_t stochastic_rounding_seed();

// `src` (a CPU floating tensor) rounded to `dtype` stochastically: a new
// contiguous CPU tensor of `dtype`.
at::Tensor round_stochastically(const at::Tensor& src, at::ScalarType dtype);
// `src` (a CPU floating tensor) rounded to the precision of `type` and kept in
// float32: the values a matmul sees under the compiler's auto-cast.
at::Tensor round_in_float(const at::Tensor& src, CastType type, bool stochastic);

} // namespace torch_neuronx
