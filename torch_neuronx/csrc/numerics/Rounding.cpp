// Rounding float32 values to narrower formats, to nearest or stochastically.
//
// Stochastic rounding in bit arithmetic, as ml_dtypes-style converters do it:
// a value v lies between two neighbours of the narrow format, lo <= |v| < hi,
// one unit in the last place (ulp) apart; it is written as hi with probability
// (|v| - lo) / ulp, so its expected value is v (unbiased). The random numbers
// come from a counter-based generator: element i of the n-th rounding call
// after seeding gets splitmix64(seed, n, i), so a run is reproducible for a
// given seed whatever the thread count.
#include "numerics/Rounding.h"

#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <c10/util/bit_cast.h>

#include <cmath>
#include <limits>

namespace torch_neuronx {
namespace detail {
std::atomic<bool> g_stochastic_rounding{false};
} // namespace detail

namespace {

std::atomic<uint64_t> g_seed{0};
std::atomic<uint64_t> g_calls{0}; // rounding calls since the generator was seeded

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;

uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The key of one rounding call: every element draws mix64(key + i * golden).
uint64_t next_call_key() {
  const uint64_t call = g_calls.fetch_add(1, std::memory_order_relaxed);
  return mix64(mix64(g_seed.load(std::memory_order_relaxed) + kGolden) ^ (call * kGolden));
}

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// |v| scaled to units of the target's ulp at v is exact in float32 (a power of
// two), so its whole and fractional parts are too.
float round_value(float v, const FloatFormat& f, bool stochastic, uint64_t bits) {
  if (!std::isfinite(v) || v == 0.f) {
    return v;
  }
  int e = 0;
  std::frexp(v, &e); // |v| = m * 2^e with m in [0.5, 1): the exponent of v is e - 1
  const int ulp_exponent = std::max(e - 1, f.min_exponent) - f.mantissa_bits;
  const float scaled = std::ldexp(std::fabs(v), -ulp_exponent);
  float whole = 0.f;
  if (stochastic) {
    whole = std::floor(scaled);
    const double fraction = static_cast<double>(scaled) - whole;
    const double u = static_cast<double>(bits >> 32) * 0x1p-32; // uniform in [0, 1)
    whole += u < fraction ? 1.f : 0.f;
  } else {
    whole = std::nearbyint(scaled); // ties to even in the default rounding mode
  }
  float r = std::ldexp(whole, ulp_exponent);
  if (r > f.max_finite) {
    r = f.has_inf ? kInf : kNaN;
  }
  return std::copysign(r, v);
}

// bf16 keeps the upper half of a float32: adding 16 random bits to the lower
// half carries into the upper half with probability (lower half) / 2^16,
// which is the distance to the lower neighbour in ulps. A carry out of the
// largest finite value gives inf, as a carry of round-to-nearest does.
uint16_t round_to_bf16_bits(float v, uint64_t bits) {
  uint32_t b = c10::bit_cast<uint32_t>(v);
  if ((b & 0x7f800000u) == 0x7f800000u) {
    return static_cast<uint16_t>((b >> 16) | ((b & 0x007fffffu) != 0 ? 0x40u : 0u)); // inf; NaN stays NaN
  }
  b = (b + static_cast<uint32_t>(bits & 0xffffu)) & 0xffff0000u;
  return static_cast<uint16_t>(b >> 16);
}

template <class Out, class Convert>
void round_all(const float* in, Out* out, int64_t n, Convert convert) {
  const uint64_t key = next_call_key();
  at::parallel_for(0, n, 1 << 14, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      out[i] = convert(in[i], mix64(key + static_cast<uint64_t>(i + 1) * kGolden));
    }
  });
}

at::Tensor as_contiguous_float(const at::Tensor& src) {
  TORCH_CHECK(src.device().is_cpu() && src.is_floating_point(),
              "rounding takes a CPU floating tensor, got ", src.device(), " ", src.scalar_type());
  return src.to(at::kFloat).contiguous();
}

} // namespace

std::optional<FloatFormat> float_format(at::ScalarType dtype) {
  switch (dtype) {
    case at::kBFloat16:
      return FloatFormat{7, -126, 3.38953139e38f, true};
    case at::kHalf:
      return FloatFormat{10, -14, 65504.f, true};
    case at::kFloat8_e4m3fn:
      return FloatFormat{3, -6, 448.f, false};
    case at::kFloat8_e5m2:
      return FloatFormat{2, -14, 57344.f, true};
    case at::kFloat8_e4m3fnuz:
      return FloatFormat{3, -7, 240.f, false};
    case at::kFloat8_e5m2fnuz:
      return FloatFormat{2, -15, 57344.f, false};
    default:
      return std::nullopt;
  }
}

FloatFormat cast_type_format(CastType type) {
  switch (type) {
    case CastType::kBF16:
      return *float_format(at::kBFloat16);
    case CastType::kFP16:
      return *float_format(at::kHalf);
    case CastType::kTF32: // float32's range, 10 mantissa bits
      return FloatFormat{10, -126, 3.40116213e38f, true};
    case CastType::kFP8E4M3: // the chip's IEEE-style e4m3: largest finite 240, then inf
      return FloatFormat{3, -6, 240.f, true};
  }
  TORCH_CHECK(false, "unknown auto-cast type ", static_cast<int>(type));
}

bool is_narrow_float(at::ScalarType dtype) {
  return float_format(dtype).has_value();
}

void set_stochastic_rounding(bool enabled, uint64_t seed) {
  g_seed.store(seed);
  g_calls.store(0);
  detail::g_stochastic_rounding.store(enabled);
}

uint64_t stochastic_rounding_seed() {
  return g_seed.load();
}

at::Tensor round_stochastically(const at::Tensor& src, at::ScalarType dtype) {
  const auto format = float_format(dtype);
  TORCH_CHECK(format.has_value(), "stochastic rounding targets a narrow float dtype, not ", dtype);
  const at::Tensor in = as_contiguous_float(src);
  at::Tensor out = at::empty(src.sizes(), src.options().dtype(dtype));
  const float* values = in.const_data_ptr<float>();
  const int64_t n = in.numel();
  if (dtype == at::kBFloat16) {
    round_all(values, out.mutable_data_ptr<at::BFloat16>(), n, [](float v, uint64_t bits) {
      return at::BFloat16(round_to_bf16_bits(v, bits), at::BFloat16::from_bits());
    });
    return out;
  }
  const FloatFormat f = *format;
  auto convert = [&f](float v, uint64_t bits) { return round_value(v, f, true, bits); };
  switch (dtype) {
    case at::kHalf:
      round_all(values, out.mutable_data_ptr<at::Half>(), n, convert);
      break;
    case at::kFloat8_e4m3fn:
      round_all(values, out.mutable_data_ptr<at::Float8_e4m3fn>(), n, convert);
      break;
    case at::kFloat8_e5m2:
      round_all(values, out.mutable_data_ptr<at::Float8_e5m2>(), n, convert);
      break;
    case at::kFloat8_e4m3fnuz:
      round_all(values, out.mutable_data_ptr<at::Float8_e4m3fnuz>(), n, convert);
      break;
    default:
      round_all(values, out.mutable_data_ptr<at::Float8_e5m2fnuz>(), n, convert);
  }
  return out;
}

at::Tensor round_in_float(const at::Tensor& src, CastType type, bool stochastic) {
  if (!stochastic && (type == CastType::kBF16 || type == CastType::kFP16)) {
    // The host's own conversion: exactly what a CPU cast to that dtype gives.
    return src.to(type == CastType::kBF16 ? at::kBFloat16 : at::kHalf).to(at::kFloat);
  }
  const at::Tensor in = as_contiguous_float(src);
  at::Tensor out = at::empty(src.sizes(), src.options().dtype(at::kFloat));
  const FloatFormat f = cast_type_format(type);
  round_all(in.const_data_ptr<float>(), out.mutable_data_ptr<float>(), in.numel(),
            [&f, stochastic](float v, uint64_t bits) { return round_value(v, f, stochastic, bits); });
  return out;
}

} // namespace torch_neuronx
