// Random ops drawn element by element from the neuron generator.
//
// Element k of an op's output (row-major order of its shape) is element
// offset + k of the stream (or offset + its index in the whole DTensor,
// runtime/Generators.h): it takes the next 1, 2 or 4 32-bit words of the
// Philox stream keyed by the seed at that position (Bits below) and maps them
// to the distribution: a uniform from 24 bits (53 for float64), a normal by
// Box-Muller, integers from 64 bits. So a draw's values depend on (seed,
// offset) and each element's index only: the same seed gives the same tensor
// whether it is drawn whole or shard by shard. Arguments are first checked by the op's
// own CPU kernel on a one-element stand-in, so bad values raise PyTorch's
// messages; values are computed in float64 and written into the (aliased)
// output, whatever its dtype and strides.
#include "aten/native/CounterRandom.h"

#include "runtime/Generators.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ExpandUtils.h>
#include <ATen/Functions.h>
#include <ATen/Parallel.h>

#include <c10/util/irange.h>

#include <cmath>
#include <limits>
#include <mutex>
#include <unordered_map>

namespace torch_neuronx::native {
namespace {

// What one element takes from the stream, and how many 32-bit words of it:
// words 1, 2 or 4, so an element never spans two 128-bit blocks.
enum class Bits : uint8_t {
  kUniform24, // [0, 1) on 24 bits (float, half, bfloat16 outputs): 1 word
  kUniform32, // [0, 1) on 32 bits (bernoulli and dropout): 1 word
  kUniform53, // [0, 1) on 53 bits (float64 outputs, transforms with logs): 2 words
  kNormal32,  // Box-Muller from two 32-bit uniforms: 2 words
  kNormal53,  // Box-Muller from two 53-bit uniforms (float64 outputs): 4 words
  kRaw64,     // 64 random bits (integers): 2 words
};

constexpr int words_per_element(Bits kind) {
  return kind == Bits::kUniform24 || kind == Bits::kUniform32 ? 1 : kind == Bits::kNormal53 ? 4 : 2;
}

inline double uniform53(uint32_t lo, uint32_t hi) {
  return static_cast<double>(((static_cast<uint64_t>(hi) << 32) | lo) >> 11) * 0x1p-53;
}

inline double box_muller(double u1, double u2) { // u1 in (0, 1]: its log is finite
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

// One element's value from its words `w`.
inline double element_value(const uint32_t* w, Bits kind) {
  switch (kind) {
    case Bits::kUniform24: return static_cast<double>(w[0] >> 8) * 0x1p-24;
    case Bits::kUniform32: return static_cast<double>(w[0]) * 0x1p-32;
    case Bits::kUniform53: return uniform53(w[0], w[1]);
    case Bits::kNormal32: return box_muller((static_cast<double>(w[0]) + 1.0) * 0x1p-32, w[1] * 0x1p-32);
    case Bits::kNormal53: return box_muller(1.0 - uniform53(w[0], w[1]), uniform53(w[2], w[3]));
    case Bits::kRaw64: break;
  }
  return 0.0;
}

// `n` values of one draw as a contiguous CPU tensor: float64, or int64
// holding 64 random bits (kRaw64). Element k's words start at word
// (offset + k) * words_per_element of the stream; consecutive elements share
// a block, computed once.
at::Tensor draw_values(const CounterDraw& draw, int64_t n, Bits kind) {
  at::Tensor out = at::empty({n}, kind == Bits::kRaw64 ? at::kLong : at::kDouble);
  const int64_t* index = draw.index.defined() ? draw.index.const_data_ptr<int64_t>() : nullptr;
  const uint64_t words = words_per_element(kind);
  auto* as_double = out.scalar_type() == at::kDouble ? out.data_ptr<double>() : nullptr;
  auto* as_long = out.scalar_type() == at::kLong ? out.data_ptr<int64_t>() : nullptr;
  at::parallel_for(0, n, 1 << 14, [&](int64_t begin, int64_t end) {
    uint64_t block = ~uint64_t{0};
    CounterBits bits{};
    for (int64_t k = begin; k < end; ++k) {
      const uint64_t word = (draw.offset + static_cast<uint64_t>(index ? index[k] : k)) * words;
      if (word / 4 != block) {
        block = word / 4;
        bits = counter_bits(draw.seed, block);
      }
      const uint32_t* w = bits.w + word % 4;
      if (as_long != nullptr) {
        as_long[k] = static_cast<int64_t>((static_cast<uint64_t>(w[1]) << 32) | w[0]);
      } else {
        as_double[k] = element_value(w, kind);
      }
    }
  });
  return out;
}

// The next `n` values of `gen` (a NeuronGenerator), shaped as `sizes`.
at::Tensor claim_values(const at::Generator& gen, at::IntArrayRef sizes, Bits kind) {
  const int64_t n = c10::multiply_integers(sizes);
  at::Generator neuron = gen;
  CounterDraw draw;
  {
    std::lock_guard<std::mutex> lock(neuron.mutex());
    draw = neuron.get<NeuronGenerator>()->claim(n);
  }
  return draw_values(draw, n, kind).view(sizes);
}

bool wide(const at::Tensor& like) {
  return like.scalar_type() == at::kDouble;
}

Bits uniform_bits(const at::Tensor& like) {
  return wide(like) ? Bits::kUniform53 : Bits::kUniform24;
}

Bits normal_bits(const at::Tensor& like) {
  return wide(like) ? Bits::kNormal53 : Bits::kNormal32;
}

// Let the op's CPU kernel check the scalar arguments on a one-element
// stand-in for `self` (with a throwaway CPU generator): its errors are
// PyTorch's own.
void check_arguments(const c10::OperatorHandle& op, const torch::jit::Stack& stack, size_t begin) {
  thread_local at::Generator scratch = at::make_generator<at::CPUGeneratorImpl>();
  torch::jit::Stack probe(stack.begin() + begin, stack.end());
  probe[0] = at::empty({1}, probe[0].toTensor().options());
  const auto& arguments = op.schema().arguments();
  for (size_t i = 1; i < arguments.size(); ++i) {
    if (probe[i].isTensor()) {
      return; // a tensor parameter (bernoulli_.Tensor) would not fit the stand-in
    }
    if (arguments[i].name() == "generator") {
      probe[i] = scratch;
    }
  }
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), &probe);
}

// The result of an in-place op: its first argument.
void return_self(torch::jit::Stack& stack, size_t begin) {
  c10::IValue self = std::move(stack[begin]);
  stack.erase(stack.begin() + begin, stack.end());
  stack.emplace_back(std::move(self));
}

// --- in-place ops with scalar parameters -----------------------------------

using InPlace = at::Tensor (*)(const at::Tensor& self, const torch::jit::Stack& stack, size_t begin,
                               const at::Generator& gen);

at::Tensor uniform_values(const at::Tensor& self, const torch::jit::Stack& s, size_t b, const at::Generator& gen) {
  const double from = s[b + 1].toDouble(), to = s[b + 2].toDouble();
  return claim_values(gen, self.sizes(), uniform_bits(self)).mul_(to - from).add_(from);
}

at::Tensor normal_values(const at::Tensor& self, const torch::jit::Stack& s, size_t b, const at::Generator& gen) {
  return claim_values(gen, self.sizes(), normal_bits(self)).mul_(s[b + 2].toDouble()).add_(s[b + 1].toDouble());
}

at::Tensor bernoulli_p_values(const at::Tensor& self, const torch::jit::Stack& s, size_t b, const at::Generator& gen) {
  return claim_values(gen, self.sizes(), Bits::kUniform32).lt_(s[b + 1].toDouble());
}

at::Tensor exponential_values(const at::Tensor& self, const torch::jit::Stack& s, size_t b, const at::Generator& gen) {
  return claim_values(gen, self.sizes(), Bits::kUniform53).neg_().log1p_().div_(-s[b + 1].toDouble());
}

at::Tensor log_normal_values(const at::Tensor& self, const torch::jit::Stack& s, size_t b, const at::Generator& gen) {
  return normal_values(self, s, b, gen).exp_();
}

at::Tensor cauchy_values(const at::Tensor& self, const torch::jit::Stack& s, size_t b, const at::Generator& gen) {
  return claim_values(gen, self.sizes(), Bits::kUniform53)
      .sub_(0.5)
      .mul_(M_PI)
      .tan_()
      .mul_(s[b + 2].toDouble())
      .add_(s[b + 1].toDouble());
}

at::Tensor geometric_values(const at::Tensor& self, const torch::jit::Stack& s, size_t b, const at::Generator& gen) {
  const double p = s[b + 1].toDouble();
  return claim_values(gen, self.sizes(), Bits::kUniform53).neg_().log1p_().div_(std::log1p(-p)).ceil_();
}

at::Tensor bernoulli_tensor_values(const at::Tensor& self, const torch::jit::Stack& s, size_t b,
                            const at::Generator& gen) {
  const at::Tensor p = s[b + 1].toTensor().expand(self.sizes());
  return claim_values(gen, self.sizes(), Bits::kUniform32).lt_(p);
}

// --- random_: integers in [from, to) -----------------------------------------

// The largest value random_ draws for `self`'s dtype when no upper bound is
// given: 2^digits for floating types (every integer up to it is exact), the
// type's maximum for integers.
int64_t random_max(const at::Tensor& self) {
  switch (self.scalar_type()) {
    case at::kDouble: return int64_t{1} << std::numeric_limits<double>::digits;
    case at::kFloat: return int64_t{1} << std::numeric_limits<float>::digits;
    case at::kHalf: return int64_t{1} << 11;
    case at::kBFloat16: return int64_t{1} << 8;
    case at::kBool: return 1;
    default:
      return AT_DISPATCH_INTEGRAL_TYPES(self.scalar_type(), "random_max", [] {
        return static_cast<int64_t>(std::numeric_limits<scalar_t>::max());
      });
  }
}

// Integers from + (bits mod range); `range` 0 stands for 2^64.
at::Tensor random_range(const at::Tensor& self, const at::Generator& gen, int64_t from, uint64_t range) {
  at::Tensor bits = claim_values(gen, self.sizes(), Bits::kRaw64).contiguous();
  auto* data = bits.data_ptr<int64_t>();
  for (const auto k : c10::irange(bits.numel())) {
    const uint64_t r = static_cast<uint64_t>(data[k]);
    data[k] = static_cast<int64_t>(static_cast<uint64_t>(from) + (range == 0 ? r : r % range));
  }
  return bits;
}

uint64_t inclusive_range(int64_t from, int64_t last) {
  return static_cast<uint64_t>(last) - static_cast<uint64_t>(from) + 1; // wraps to 0 for 2^64
}

at::Tensor random_full_values(const at::Tensor& self, const torch::jit::Stack&, size_t, const at::Generator& gen) {
  return random_range(self, gen, 0, inclusive_range(0, random_max(self)));
}

at::Tensor random_from_values(const at::Tensor& self, const torch::jit::Stack& s, size_t b, const at::Generator& gen) {
  const int64_t from = s[b + 1].toInt();
  const auto& to = s[b + 2];
  return random_range(self, gen, from,
                      to.isNone() ? inclusive_range(from, random_max(self))
                                  : static_cast<uint64_t>(to.toInt()) - static_cast<uint64_t>(from));
}

at::Tensor random_to_values(const at::Tensor& self, const torch::jit::Stack& s, size_t b, const at::Generator& gen) {
  return random_range(self, gen, 0, static_cast<uint64_t>(s[b + 1].toInt()));
}

template <InPlace values>
bool in_place(const c10::OperatorHandle& op, torch::jit::Stack& stack, size_t begin, const at::Generator& gen) {
  at::Tensor self = stack[begin].toTensor();
  if (self.is_complex()) {
    return false;
  }
  check_arguments(op, stack, begin);
  if (self.numel() > 0) {
    self.copy_(values(self, stack, begin, gen));
  }
  return_self(stack, begin);
  return true;
}

// --- functional ops ----------------------------------------------------------

void check_std(const at::Tensor& std) {
  TORCH_CHECK(!std.is_complex(), "normal expects standard deviation to be non-complex");
  TORCH_CHECK(std.numel() == 0 || std.min().ge(0).item<bool>(),
              "normal expects all elements of std >= 0.0");
}

void return_result(torch::jit::Stack& stack, size_t begin, at::Tensor result) {
  stack.erase(stack.begin() + begin, stack.end());
  stack.emplace_back(std::move(result));
}

bool normal_tensor_float(const c10::OperatorHandle&, torch::jit::Stack& s, size_t b, const at::Generator& gen) {
  const at::Tensor mean = s[b].toTensor();
  const double std = s[b + 1].toDouble();
  TORCH_CHECK(std >= 0.0, "normal expects std >= 0.0, but found std ", std);
  at::Tensor z = claim_values(gen, mean.sizes(), normal_bits(mean));
  return_result(s, b, z.mul_(std).add_(mean).to(mean.scalar_type()));
  return true;
}

bool normal_float_tensor(const c10::OperatorHandle&, torch::jit::Stack& s, size_t b, const at::Generator& gen) {
  const double mean = s[b].toDouble();
  const at::Tensor std = s[b + 1].toTensor();
  check_std(std);
  at::Tensor z = claim_values(gen, std.sizes(), normal_bits(std));
  return_result(s, b, z.mul_(std).add_(mean).to(std.scalar_type()));
  return true;
}

bool normal_tensor_tensor(const c10::OperatorHandle&, torch::jit::Stack& s, size_t b, const at::Generator& gen) {
  const at::Tensor mean = s[b].toTensor(), std = s[b + 1].toTensor();
  check_std(std);
  const auto shape = at::infer_size(mean.sizes(), std.sizes());
  at::Tensor z = claim_values(gen, shape, normal_bits(mean));
  return_result(s, b, z.mul_(std).add_(mean).to(at::result_type(mean, std)));
  return true;
}

// native_dropout's mask, as CPU's (bool), from the generator; evaluation and
// empty inputs draw nothing and run the CPU kernel.
bool native_dropout(const c10::OperatorHandle&, torch::jit::Stack& s, size_t b, const at::Generator& gen) {
  const at::Tensor input = s[b].toTensor();
  const double p = s[b + 1].toDouble();
  const bool training = s[b + 2].isNone() || s[b + 2].toBool();
  if (!training || input.numel() == 0) {
    return false;
  }
  const double keep = 1.0 - p;
  const double scale = keep == 0 ? 0.0 : 1.0 / keep;
  at::Tensor mask = claim_values(gen, input.sizes(), Bits::kUniform32).lt_(keep).to(at::kBool);
  at::Tensor output = input.mul(mask).mul_(scale);
  s.erase(s.begin() + b, s.end());
  s.emplace_back(std::move(output));
  s.emplace_back(std::move(mask));
  return true;
}

using Kernel = bool (*)(const c10::OperatorHandle&, torch::jit::Stack&, size_t, const at::Generator&);

const std::unordered_map<c10::OperatorName, Kernel>& kernels() {
  static const auto* table = new std::unordered_map<c10::OperatorName, Kernel>{
      {{"aten::uniform_", ""}, &in_place<&uniform_values>},
      {{"aten::normal_", ""}, &in_place<&normal_values>},
      {{"aten::bernoulli_", "float"}, &in_place<&bernoulli_p_values>},
      {{"aten::bernoulli_", "Tensor"}, &in_place<&bernoulli_tensor_values>},
      {{"aten::random_", ""}, &in_place<&random_full_values>},
      {{"aten::random_", "from"}, &in_place<&random_from_values>},
      {{"aten::random_", "to"}, &in_place<&random_to_values>},
      {{"aten::exponential_", ""}, &in_place<&exponential_values>},
      {{"aten::log_normal_", ""}, &in_place<&log_normal_values>},
      {{"aten::cauchy_", ""}, &in_place<&cauchy_values>},
      {{"aten::geometric_", ""}, &in_place<&geometric_values>},
      {{"aten::normal", "Tensor_float"}, &normal_tensor_float},
      {{"aten::normal", "float_Tensor"}, &normal_float_tensor},
      {{"aten::normal", "Tensor_Tensor"}, &normal_tensor_tensor},
      {{"aten::native_dropout", ""}, &native_dropout},
  };
  return *table;
}

} // namespace

bool run_counter_random(const c10::OperatorHandle& op, torch::jit::Stack& stack, size_t begin,
                        const at::Generator& gen) {
  const auto& table = kernels();
  const auto it = table.find(op.operator_name());
  return it != table.end() && it->second(op, stack, begin, gen);
}

bool is_native_dropout(const c10::OperatorHandle& op) {
  static const auto handle = c10::Dispatcher::singleton().findSchemaOrThrow("aten::native_dropout", "");
  return op == handle;
}

} // namespace torch_neuronx::native
