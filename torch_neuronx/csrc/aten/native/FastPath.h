// The unboxed fast-path kernel, generated per op from its C++ signature.
//
// The boxed fallback pays for its generality on every call: the dispatcher
// copies each argument into an IValue stack (for a tensor Python owns, that
// copy takes the GIL, see Call.h), the schema is walked argument by
// argument and the CPU kernel is reached by a boxed redispatch. For the ops
// that dominate eager training and generation (pointwise math, reductions,
// matmuls, softmax, cat, ...) this file registers unboxed kernels instead,
// generated from each op's C++ signature (`at::_ops::<op>::schema`): neuron
// arguments are aliased without copying the caller's tensors, the CPU kernel
// is called unboxed, and written arguments and results go through the same
// CallState as in the fallback, so behaviour is identical, and each call gets
// the fallback's kernel key (an out= argument keyed as an output, KernelKey.h).
// Random ops stay on the fallback. The list of ops is the route table
// aten/FastPathRoutes.cpp.
#pragma once
#include "aten/native/Call.h"
#include "aten/native/CpuFallback.h"
#include "accounting/Accounting.h"
#include "runtime/HostPool.h"

#include <ATen/Operators.h>
#include <ATen/core/boxing/impl/boxing.h>

#include <array>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace torch_neuronx::native {

const c10::DispatchKeySet kCpuKeys(c10::DispatchKey::CPU);

// ---- the kernel key, argument by argument (as the boxed path: KernelKey.h) -

inline void key_arg(KeyBuilder& key, const at::Tensor& t, bool, bool is_out) {
  key.tensor(t, is_out);
}

inline void key_arg(KeyBuilder& key, const std::optional<at::Tensor>& t, bool, bool is_out) {
  if (t.has_value()) {
    key.tensor(*t, is_out); // boxing would copy the tensor
  } else {
    key.none();
  }
}

inline void key_arg(KeyBuilder& key, at::TensorList list, bool, bool is_out) {
  for (const auto& t : list) {
    key.tensor(t, is_out);
  }
}

inline void key_arg(KeyBuilder& key, const at::ITensorListRef& list, bool, bool is_out) {
  for (const auto& t : list) {
    key.tensor(t, is_out);
  }
}

inline void key_arg(KeyBuilder& key, at::IntArrayRef values, bool is_static, bool) {
  for (auto v : values) {
    key.integer(v, is_static);
  }
}

inline void key_arg(KeyBuilder& key, at::OptionalIntArrayRef values, bool is_static, bool is_out) {
  if (values.has_value()) {
    key_arg(key, *values, is_static, is_out);
  } else {
    key.none();
  }
}

inline void key_arg(KeyBuilder& key, const c10::Scalar& s, bool is_static, bool) {
  key.scalar(s, is_static);
}

template <class T>
void key_arg(KeyBuilder& key, const T& value, bool is_static, bool is_out) {
  key.value(c10::IValue(value), is_static, is_out);
}

// ---- one call: argument slots and result mapping ---------------------------

// What one argument keeps while the kernel runs, chosen by its C++ type: the
// CPU alias of a neuron tensor, the aliases of a list, nothing for a scalar
// (so a call builds and tears down only what its own arguments need).
template <class T>
struct Slot {
  template <class U>
  static U&& map(CallState&, U&& value, Access) {
    return std::forward<U>(value);
  }
};

template <>
struct Slot<const at::Tensor&> {
  c10::MaybeOwned<at::Tensor> alias;
  const at::Tensor& map(CallState& state, const at::Tensor& t, Access access) {
    if (!is_neuron(t)) {
      state.note_other(t);
      return t;
    }
    alias = state.alias(t, access);
    return *alias;
  }
};

// Mutable arguments (in-place `self`, out=): the result is this same tensor.
template <>
struct Slot<at::Tensor&> {
  c10::MaybeOwned<at::Tensor> alias;
  at::Tensor* original = nullptr;
  at::Tensor& map(CallState& state, at::Tensor& t, Access access) {
    if (!is_neuron(t)) {
      state.note_other(t);
      return t;
    }
    alias = state.alias(t, access);
    original = &t;
    // The kernel's signature takes a mutable handle; ATen's in-place and
    // out= kernels change the tensor behind it, never the handle itself.
    return const_cast<at::Tensor&>(*alias);
  }
};

template <>
struct Slot<const std::optional<at::Tensor>&> {
  std::optional<at::Tensor> alias;
  const std::optional<at::Tensor>& map(
      CallState& state, const std::optional<at::Tensor>& t, Access access) {
    if (!t.has_value() || !is_neuron(*t)) {
      if (t.has_value()) {
        state.note_other(*t);
      }
      return t;
    }
    alias = *state.alias(*t, access);
    return alias;
  }
};

template <class List>
std::vector<at::Tensor> map_list(CallState& state, const List& list, Access access) {
  std::vector<at::Tensor> out;
  out.reserve(list.size());
  for (const at::Tensor& t : list) {
    if (is_neuron(t)) {
      out.push_back(*state.alias(t, access));
    } else {
      state.note_other(t);
      out.push_back(t);
    }
  }
  return out;
}

template <>
struct Slot<at::TensorList> {
  std::vector<at::Tensor> aliases;
  at::TensorList map(CallState& state, at::TensorList list, Access access) {
    aliases = map_list(state, list, access);
    return aliases;
  }
};

template <>
struct Slot<const at::ITensorListRef&> {
  std::vector<at::Tensor> aliases;
  std::optional<at::ITensorListRef> ref;
  const at::ITensorListRef& map(CallState& state, const at::ITensorListRef& list, Access access) {
    aliases = map_list(state, list, access);
    return ref.emplace(aliases);
  }
};

// Index lists (index.Tensor, index_put_): CPU index tensors are allowed
// beside neuron ones, as in the fallback and on CUDA.
template <>
struct Slot<const c10::List<std::optional<at::Tensor>>&> {
  std::optional<c10::List<std::optional<at::Tensor>>> aliases;
  const c10::List<std::optional<at::Tensor>>& map(
      CallState& state, const c10::List<std::optional<at::Tensor>>& list, Access access) {
    c10::List<std::optional<at::Tensor>> out;
    out.reserve(list.size());
    for (size_t j = 0; j < list.size(); ++j) {
      std::optional<at::Tensor> t = list.get(j);
      if (t.has_value() && t->defined() && is_neuron(*t)) {
        out.push_back(*state.alias(*t, access));
      } else {
        out.push_back(std::move(t));
      }
    }
    return aliases.emplace(std::move(out));
  }
};

// The caller's arguments, mapped to what the CPU kernel sees, one slot each.
// The caller maps them strictly left to right (braced initialisation).
template <class... Args>
class Call {
 public:
  static constexpr size_t N = sizeof...(Args);
  explicit Call(const std::array<Access, N>& access) : access_(access) {}

  CallState state{/*aten_kernel=*/true};

  template <size_t I, class T>
  decltype(auto) map(T&& value) {
    return std::get<I>(slots_).map(state, std::forward<T>(value), access_[I]);
  }

  // The caller's tensor behind an in-place result.
  at::Tensor& original_of(const at::Tensor& result) {
    at::Tensor* found = nullptr;
    std::apply([&](auto&... slot) { ((found = found ? found : original(slot, result)), ...); },
               slots_);
    TORCH_INTERNAL_ASSERT(found != nullptr,
                          "neuron fast path: in-place result is not a mutable argument");
    return *found;
  }

 private:
  template <class S>
  static at::Tensor* original(S&, const at::Tensor&) {
    return nullptr;
  }
  static at::Tensor* original(Slot<at::Tensor&>& slot, const at::Tensor& result) {
    return slot.original != nullptr && slot.alias->is_same(result) ? slot.original : nullptr;
  }

  const std::array<Access, N>& access_;
  std::tuple<Slot<Args>...> slots_;
};

// How each kind of result comes back to the device; a registered op with any
// other return type does not compile.
template <class R>
struct ResultMapper;

template <>
struct ResultMapper<at::Tensor> {
  template <class C>
  static at::Tensor map(C& call, at::Tensor&& r) {
    return call.state.to_neuron(std::move(r));
  }
};

template <>
struct ResultMapper<at::Tensor&> {
  template <class C>
  static at::Tensor& map(C& call, at::Tensor& r) {
    return call.original_of(r);
  }
};

template <>
struct ResultMapper<std::vector<at::Tensor>> {
  template <class C>
  static std::vector<at::Tensor> map(C& call, std::vector<at::Tensor>&& r) {
    for (auto& t : r) {
      t = call.state.to_neuron(std::move(t));
    }
    return std::move(r);
  }
};

template <class... Ts>
struct ResultMapper<std::tuple<Ts...>> {
  static_assert((std::is_same_v<Ts, at::Tensor> && ...), "tuples of tensors only");
  template <class C>
  static std::tuple<Ts...> map(C& call, std::tuple<Ts...>&& r) {
    return std::apply(
        [&](auto&... t) { return std::tuple<Ts...>(call.state.to_neuron(std::move(t))...); }, r);
  }
};

// ---- the kernel, generated per op ------------------------------------------

template <class Op, class Sig = typename Op::schema>
struct FastKernel;

template <class Op, class Ret, class... Args>
struct FastKernel<Op, Ret(Args...)> {
  static constexpr size_t N = sizeof...(Args);

  // Inline: the static's guard is one load on every call.
  C10_ALWAYS_INLINE static const c10::OperatorHandle& handle() {
    static const c10::OperatorHandle op =
        c10::Dispatcher::singleton().findSchemaOrThrow(Op::name, Op::overload_name);
    return op;
  }
  C10_ALWAYS_INLINE static const c10::FunctionSchema& schema() {
    static const c10::FunctionSchema& schema = handle().schema();
    return schema;
  }

  // Per argument, from the schema: written or not, and an in-place self
  // (positional, of an op that is not a view op) keeps its memory and layout.
  static const std::array<Access, N>& access() {
    static const std::array<Access, N> access = [] {
      std::array<Access, N> a{};
      const auto& arguments = handle().schema().arguments();
      TORCH_INTERNAL_ASSERT(arguments.size() == N, Op::name, ": schema and signature differ");
      const bool view_op = handle().hasTag(at::Tag::inplace_view);
      for (size_t i = 0; i < N; ++i) {
        const auto* alias = arguments[i].alias_info();
        if (alias == nullptr || !alias->isWrite()) {
          a[i] = Access::kRead;
        } else {
          a[i] = arguments[i].kwarg_only() || view_op ? Access::kWrite : Access::kWriteValues;
        }
      }
      return a;
    }();
    return access;
  }

  // The kernel accounting of one call (when accounting is on), also for a
  // native kernel that does this op's work another way (scalar_tensor).
  static void account(Args... args) {
    if (!accounting_enabled()) {
      return;
    }
    static_assert(N <= 64, "argument masks cover 64 arguments");
    const ArgumentMasks masks = argument_masks(schema());
    KeyBuilder key;
    size_t i = 0;
    // Left to right (a fold over the comma operator), as the boxed key.
    ((key_arg(key, args, ((masks.is_static >> i) & 1) != 0, ((masks.is_out >> i) & 1) != 0),
      ++i),
     ...);
    account_call(schema(), key, [&] { return c10::impl::boxArgs<Args...>(args...); });
  }

  static Ret call(Args... args) {
    if (C10_UNLIKELY(precision_transforms_active())) {
      return call_boxed(args...);
    }
    return call_mapped(std::index_sequence_for<Args...>{}, args...);
  }

  // With stochastic rounding or an auto-cast on, the call takes the boxed
  // fallback, where the precision transforms are (numerics/Precision.h).
  C10_NOINLINE static Ret call_boxed(Args... args) {
    static const c10::BoxedKernel kernel = c10::BoxedKernel::makeFromFunction<&neuron_fallback>();
    return c10::impl::BoxedKernelWrapper<Ret(Args...)>::call(
        kernel, handle(), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), args...);
  }

  template <size_t... I>
  static Ret call_mapped(std::index_sequence<I...>, Args... args) {
    Call<Args...> call(access());
    std::tuple<Args...> mapped{call.template map<I>(args)...};
    call.state.check_devices(handle().operator_name());
    account(args...);
    auto run = [](auto&... a) -> Ret {
      HostPoolScope scope;
      return Op::redispatch(kCpuKeys, a...);
    };
    if constexpr (std::is_void_v<Ret>) {
      std::apply(run, mapped);
      call.state.sync_written_args();
    } else {
      Ret result = std::apply(run, mapped);
      call.state.sync_written_args();
      return ResultMapper<Ret>::map(call, std::forward<Ret>(result));
    }
  }
};

} // namespace torch_neuronx::native
