// The chip's precision rules on one boxed call (see Precision.h).
//
// Stochastic rounding: a NeuronCore computes in FP32 and rounds when it
// writes bf16/fp16, so under stochastic rounding each bf16/fp16 argument is
// widened to an FP32 copy, the CPU kernel computes in FP32, and every narrow
// value it writes (a written argument, a fresh result) is rounded
// stochastically into the dtype the op would have given it. That dtype comes
// from the op's meta kernel (the widened run returns FP32). Random ops are
// left alone (they run on the host CPU on the real product), and so are ops
// whose results view their arguments (they write no new values).
//
// Auto-cast (neuronx-cc --auto-cast): `matmult` rounds the FP32 operands of
// TensorE ops (the matrices, not biases) to the auto-cast type, which then
// accumulate in FP32; `all` rounds every FP32 input and result.
#include "numerics/Precision.h"

#include <ATen/ops/empty_strided.h>

#include <algorithm>
#include <mutex>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

namespace torch_neuronx {
namespace detail {
std::atomic<bool> g_transforms{false};
uint64_t g_refused_dtypes = 0;
} // namespace detail

namespace {

std::atomic<AutoCast> g_auto_cast{AutoCast::kNone};
std::atomic<CastType> g_cast_type{CastType::kBF16};
std::mutex g_mutex; // guards the sets and messages below
std::unordered_set<std::string> g_tensor_engine_ops;
std::set<std::string> g_unrounded_ops;
std::vector<std::string> g_refusals(static_cast<size_t>(at::ScalarType::NumOptions));
bool g_mx_supported = false;
std::string g_mx_refusal;

void update_transforms() {
  detail::g_transforms.store(stochastic_rounding_enabled() || g_auto_cast.load() != AutoCast::kNone);
}

std::string op_name(const c10::OperatorHandle& op) {
  const auto& name = op.schema().operator_name();
  return name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
}

bool is_tensor_engine_op(const c10::OperatorHandle& op) {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_tensor_engine_ops.count(op.schema().operator_name().name) > 0 ||
      g_tensor_engine_ops.count(op_name(op)) > 0;
}

// Whether a result of the op views one of its arguments (a view op, an
// in-place or out= op returning its argument): it writes no new values.
bool returns_alias(const c10::FunctionSchema& schema) {
  for (const auto& r : schema.returns()) {
    if (r.alias_info() != nullptr) {
      return true;
    }
  }
  return false;
}

bool has_tensor_returns(const c10::FunctionSchema& schema) {
  for (const auto& r : schema.returns()) {
    const auto kind = r.real_type()->kind();
    if (kind == c10::TypeKind::TensorType || kind == c10::TypeKind::ListType ||
        kind == c10::TypeKind::OptionalType) {
      return true;
    }
  }
  return false;
}

// The matrices of a TensorE op, not its bias: addmm/baddbmm/addbmm/addmv add
// `self` after the product, on another engine.
bool is_matmul_operand(const c10::FunctionSchema& schema, const c10::Argument& arg) {
  if (arg.name() == "bias") {
    return false;
  }
  if (arg.name() != "self") {
    return true;
  }
  for (const auto& other : schema.arguments()) {
    if (other.name() == "mat1" || other.name() == "batch1" || other.name() == "mat") {
      return false;
    }
  }
  return true;
}

// A meta tensor for a device argument; host tensors (0-dim CPU scalars, the
// wrapped numbers of `x + 0.5` among them) stay, as meta kernels take them.
at::Tensor to_meta(const at::Tensor& t) {
  if (!t.defined() || t.device().is_cpu()) {
    return t;
  }
  return at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kMeta));
}

// The dtypes of the op's tensor results (flattened as the fallback maps
// them), from its meta kernel; nullopt when it has none.
std::optional<std::vector<at::ScalarType>> meta_result_dtypes(
    const c10::OperatorHandle& op, const torch::jit::Stack& stack, size_t begin) {
  torch::jit::Stack meta(stack.begin() + static_cast<std::ptrdiff_t>(begin), stack.end());
  for (auto& v : meta) {
    if (v.isTensor()) {
      v = to_meta(v.toTensor());
    } else if (v.isTensorList()) {
      std::vector<at::Tensor> list;
      for (const at::Tensor& t : v.toTensorList()) {
        list.push_back(to_meta(t));
      }
      v = c10::IValue(list);
    } else if (v.isDevice() && !v.toDevice().is_cpu()) {
      v = c10::IValue(c10::Device(c10::kMeta));
    }
  }
  try {
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), &meta);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  std::vector<at::ScalarType> dtypes;
  for (const auto& v : meta) {
    if (v.isTensor()) {
      dtypes.push_back(v.toTensor().defined() ? v.toTensor().scalar_type() : at::ScalarType::Undefined);
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList()) {
        dtypes.push_back(t.scalar_type());
      }
    }
  }
  return dtypes;
}

// What type promotion reads of the arguments: tensor dtypes, whether each is
// 0-dim or a wrapped number, and the kind of each scalar; other values in full.
std::string promotion_key(const c10::OperatorHandle& op, const torch::jit::Stack& stack, size_t begin) {
  std::string key = op_name(op);
  auto tensor = [&key](const at::Tensor& t) {
    key += t.defined() ? c10::toString(t.scalar_type()) : "U";
    key += t.defined() && t.dim() == 0 ? (t.unsafeGetTensorImpl()->is_wrapped_number() ? "w" : "0") : "";
  };
  for (size_t i = begin; i < stack.size(); ++i) {
    const auto& v = stack[i];
    key += '|';
    if (v.isTensor()) {
      tensor(v.toTensor());
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList()) {
        tensor(t);
        key += ',';
      }
    } else if (v.isDouble() || v.isInt() || v.isComplexDouble() || v.isBool() || v.isNone() || v.isList()) {
      key += v.tagKind();
    } else {
      std::ostringstream value;
      value << v;
      key += value.str();
    }
  }
  return key;
}

// Result dtypes depend on argument dtypes only, so the meta kernel (often a
// Python reference) runs once per op and promotion key.
std::optional<std::vector<at::ScalarType>> result_dtypes(
    const c10::OperatorHandle& op, const torch::jit::Stack& stack, size_t begin) {
  static std::mutex mutex;
  static std::unordered_map<std::string, std::optional<std::vector<at::ScalarType>>> known;
  std::string key = promotion_key(op, stack, begin);
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto found = known.find(key);
    if (found != known.end()) {
      return found->second;
    }
  }
  auto dtypes = meta_result_dtypes(op, stack, begin);
  std::lock_guard<std::mutex> lock(mutex);
  known.emplace(std::move(key), dtypes);
  return dtypes;
}

} // namespace

void set_auto_cast(AutoCast mode, CastType type) {
  g_cast_type.store(type);
  g_auto_cast.store(mode);
  update_transforms();
}

void configure_stochastic_rounding(bool enabled, uint64_t seed) {
  set_stochastic_rounding(enabled, seed);
  update_transforms();
}

void set_tensor_engine_ops(const std::vector<std::string>& names) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_tensor_engine_ops = std::unordered_set<std::string>(names.begin(), names.end());
}

std::vector<std::string> unrounded_ops() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return {g_unrounded_ops.begin(), g_unrounded_ops.end()};
}

void set_refused_dtypes(const std::vector<std::pair<at::ScalarType, std::string>>& refused) {
  std::lock_guard<std::mutex> lock(g_mutex);
  uint64_t mask = 0;
  for (auto& message : g_refusals) {
    message.clear();
  }
  for (const auto& [dtype, message] : refused) {
    mask |= uint64_t{1} << static_cast<int>(dtype);
    g_refusals[static_cast<size_t>(dtype)] = message;
  }
  detail::g_refused_dtypes = mask;
}

void raise_refused_dtype(at::ScalarType dtype, const std::string& op) {
  std::string message;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    message = g_refusals[static_cast<size_t>(dtype)];
  }
  // The real product's form of a kernel that fails to compile (TR
  // csrc/core/utils/ErrorHandler.cpp:42-92), on one line; the message holds
  // the compiler's error text (numerics/fp8.py).
  TORCH_CHECK(false, "Compilation error occurred on Neuron for operation=", op, "; ", message);
}

void set_mx_support(bool supported, std::string refusal) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_mx_supported = supported;
  g_mx_refusal = std::move(refusal);
}

void check_mx_supported(const std::string& op) {
  std::lock_guard<std::mutex> lock(g_mutex);
  TORCH_CHECK(g_mx_supported, op, ": ", g_mx_refusal);
}

PrecisionCall::PrecisionCall(const c10::OperatorHandle& op, const torch::jit::Stack& stack, size_t begin)
    : op_(op), begin_(begin), stochastic_(stochastic_rounding_enabled()),
      cast_type_(g_cast_type.load()) {
  const auto& schema = op.schema();
  const AutoCast auto_cast = g_auto_cast.load();
  auto_cast_all_ = auto_cast == AutoCast::kAll;
  const bool widen = stochastic_ && !returns_alias(schema) &&
      !op.hasTag(at::Tag::nondeterministic_seeded);
  const bool matmul = auto_cast == AutoCast::kMatmult && is_tensor_engine_op(op);
  const auto& arguments = schema.arguments();
  for (size_t i = 0; i < arguments.size(); ++i) {
    const auto& arg = arguments[i];
    const bool written = arg.alias_info() != nullptr && arg.alias_info()->isWrite();
    if (written && arg.kwarg_only()) {
      continue; // out= buffers keep their own dtype and rounding
    }
    auto consider = [&](const at::Tensor& t, int64_t element) {
      if (!t.defined() || t.device().is_cpu() || !t.is_floating_point()) {
        return;
      }
      const auto dtype = t.scalar_type();
      if (widen && (dtype == at::kBFloat16 || dtype == at::kHalf)) {
        slots_.push_back({begin + i, element, dtype, Kind::kWiden, written, {}, {}});
      } else if (dtype == at::kFloat &&
                 (auto_cast_all_ || (matmul && !written && t.dim() >= 2 && is_matmul_operand(schema, arg)))) {
        slots_.push_back({begin + i, element, dtype, Kind::kAutoCast, written, {}, {}});
      }
    };
    const auto& value = stack[begin + i];
    if (value.isTensor()) {
      consider(value.toTensor(), -1);
    } else if (value.isTensorList()) {
      const auto list = value.toTensorList();
      for (size_t j = 0; j < list.size(); ++j) {
        consider(list.get(j), static_cast<int64_t>(j));
      }
    }
  }
  const bool widened = std::any_of(slots_.begin(), slots_.end(),
                                   [](const Slot& s) { return s.kind == Kind::kWiden; });
  if (widened && has_tensor_returns(schema)) {
    auto dtypes = result_dtypes(op, stack, begin);
    if (dtypes) {
      result_dtypes_ = std::move(*dtypes);
    } else {
      // Without result dtypes the call keeps the host's rounding.
      slots_.erase(std::remove_if(slots_.begin(), slots_.end(),
                                  [](const Slot& s) { return s.kind == Kind::kWiden; }),
                   slots_.end());
      std::lock_guard<std::mutex> lock(g_mutex);
      g_unrounded_ops.insert(op_name(op));
    }
  }
}

void PrecisionCall::before_run(torch::jit::Stack& stack) {
  for (auto& slot : slots_) {
    auto& value = stack[slot.position];
    slot.alias = slot.element < 0 ? value.toTensor() : value.toTensorList().get(slot.element);
    slot.copy = slot.kind == Kind::kWiden ? slot.alias.to(at::kFloat)
                                          : round_in_float(slot.alias, cast_type_, stochastic_);
    if (slot.element < 0) {
      value = slot.copy;
    } else {
      value.toTensorList().set(slot.element, slot.copy);
    }
  }
}

at::Tensor PrecisionCall::rounded(const Slot& slot) const {
  return slot.kind == Kind::kWiden ? round_stochastically(slot.copy, slot.dtype)
                                   : round_in_float(slot.copy, cast_type_, stochastic_);
}

void PrecisionCall::after_run(torch::jit::Stack& stack, size_t num_returns) {
  for (const auto& slot : slots_) {
    if (slot.written) {
      TORCH_INTERNAL_ASSERT(slot.copy.sizes() == slot.alias.sizes(),
                            op_name(op_), ": an in-place kernel resized its argument");
      slot.alias.copy_(rounded(slot));
    }
  }
  for (size_t i = stack.size() - num_returns; i < stack.size(); ++i) {
    if (!stack[i].isTensor()) {
      continue;
    }
    const at::Tensor& r = stack[i].toTensor();
    for (const auto& slot : slots_) {
      if (slot.copy.is_same(r)) {
        stack[i] = slot.alias;
        break;
      }
    }
  }
}

at::Tensor PrecisionCall::finish_result(at::Tensor&& result, size_t index) const {
  if (!result.defined() || !result.is_floating_point()) {
    return std::move(result);
  }
  const auto wanted = index < result_dtypes_.size() ? result_dtypes_[index] : result.scalar_type();
  if (wanted != result.scalar_type() && is_narrow_float(wanted)) {
    return round_stochastically(result, wanted);
  }
  if (auto_cast_all_ && result.scalar_type() == at::kFloat) {
    return round_in_float(result, cast_type_, stochastic_);
  }
  return std::move(result);
}

} // namespace torch_neuronx
