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
#include "accounting/Accounting.h"
#include "runtime/HostPool.h"

#include <ATen/Operators.h>
#include <ATen/core/boxing/impl/boxing.h>

#include <array>
#include <cstring>
#include <tuple>
#include <type_traits>
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

// The caller's arguments, mapped to what the CPU kernel sees. Arguments are
// mapped strictly left to right (braced initialisation), so `next_` is the
// position of the argument being mapped.
template <size_t N>
class Call {
 public:
  explicit Call(const std::array<bool, N>& written) : written_(written) {}

  CallState state{/*aten_kernel=*/true};

  const at::Tensor& map(const at::Tensor& t) {
    const size_t i = next_++;
    if (!is_neuron(t)) {
      state.note_other(t);
      return t;
    }
    tensors_[i] = state.alias(t, written_[i]);
    return tensors_[i];
  }

  // Mutable arguments (in-place `self`): the result is this same tensor.
  at::Tensor& map(at::Tensor& t) {
    const size_t i = next_++;
    if (!is_neuron(t)) {
      state.note_other(t);
      return t;
    }
    tensors_[i] = state.alias(t, /*is_write=*/true);
    originals_[i] = &t;
    return tensors_[i];
  }

  const std::optional<at::Tensor>& map(const std::optional<at::Tensor>& t) {
    const size_t i = next_++;
    if (!t.has_value() || !is_neuron(*t)) {
      if (t.has_value()) {
        state.note_other(*t);
      }
      return t;
    }
    optionals_[i] = state.alias(*t, written_[i]);
    return optionals_[i];
  }

  at::TensorList map(at::TensorList list) {
    const size_t i = next_++;
    return lists_[i] = map_list(list, written_[i]);
  }

  const at::ITensorListRef& map(const at::ITensorListRef& list) {
    const size_t i = next_++;
    lists_[i] = map_list(list, written_[i]);
    list_refs_[i].emplace(lists_[i]);
    return *list_refs_[i];
  }

  // Index lists (index.Tensor, index_put_): CPU index tensors are allowed
  // beside neuron ones, as in the fallback and on CUDA.
  const c10::List<std::optional<at::Tensor>>& map(
      const c10::List<std::optional<at::Tensor>>& list) {
    const size_t i = next_++;
    c10::List<std::optional<at::Tensor>> out;
    out.reserve(list.size());
    for (size_t j = 0; j < list.size(); ++j) {
      std::optional<at::Tensor> t = list.get(j);
      if (t.has_value() && t->defined() && is_neuron(*t)) {
        out.push_back(state.alias(*t, written_[i]));
      } else {
        out.push_back(std::move(t));
      }
    }
    return index_lists_[i].emplace(std::move(out));
  }

  template <class T>
  T&& map(T&& value) {
    ++next_;
    return std::forward<T>(value);
  }

  // The caller's tensor behind an in-place result.
  at::Tensor& original_of(const at::Tensor& result) {
    for (size_t i = 0; i < N; ++i) {
      if (originals_[i] != nullptr && tensors_[i].is_same(result)) {
        return *originals_[i];
      }
    }
    TORCH_INTERNAL_ASSERT(false, "neuron fast path: in-place result is not a mutable argument");
  }

 private:
  template <class List>
  std::vector<at::Tensor> map_list(const List& list, bool is_write) {
    std::vector<at::Tensor> out;
    out.reserve(list.size());
    for (const at::Tensor& t : list) {
      if (is_neuron(t)) {
        out.push_back(state.alias(t, is_write));
      } else {
        state.note_other(t);
        out.push_back(t);
      }
    }
    return out;
  }

  const std::array<bool, N>& written_;
  size_t next_ = 0;
  std::array<at::Tensor, N> tensors_;
  std::array<at::Tensor*, N> originals_{};
  std::array<std::optional<at::Tensor>, N> optionals_;
  std::array<std::vector<at::Tensor>, N> lists_;
  std::array<std::optional<at::ITensorListRef>, N> list_refs_;
  std::array<std::optional<c10::List<std::optional<at::Tensor>>>, N> index_lists_;
};

// How each kind of result comes back to the device; a registered op with any
// other return type does not compile.
template <class R>
struct ResultMapper;

template <>
struct ResultMapper<at::Tensor> {
  template <size_t N>
  static at::Tensor map(Call<N>& call, at::Tensor&& r) {
    return call.state.to_neuron(r);
  }
};

template <>
struct ResultMapper<at::Tensor&> {
  template <size_t N>
  static at::Tensor& map(Call<N>& call, at::Tensor& r) {
    return call.original_of(r);
  }
};

template <>
struct ResultMapper<std::vector<at::Tensor>> {
  template <size_t N>
  static std::vector<at::Tensor> map(Call<N>& call, std::vector<at::Tensor>&& r) {
    for (auto& t : r) {
      t = call.state.to_neuron(t);
    }
    return std::move(r);
  }
};

template <class... Ts>
struct ResultMapper<std::tuple<Ts...>> {
  static_assert((std::is_same_v<Ts, at::Tensor> && ...), "tuples of tensors only");
  template <size_t N>
  static std::tuple<Ts...> map(Call<N>& call, std::tuple<Ts...>&& r) {
    return std::apply(
        [&](auto&... t) { return std::tuple<Ts...>(call.state.to_neuron(t)...); }, r);
  }
};

// ---- the kernel, generated per op ------------------------------------------

template <class Op, class Sig = typename Op::schema>
struct FastKernel;

template <class Op, class Ret, class... Args>
struct FastKernel<Op, Ret(Args...)> {
  static constexpr size_t N = sizeof...(Args);

  static const c10::OperatorHandle& handle() {
    static const c10::OperatorHandle op =
        c10::Dispatcher::singleton().findSchemaOrThrow(Op::name, Op::overload_name);
    return op;
  }

  static const std::array<bool, N>& written() {
    static const std::array<bool, N> written = [] {
      std::array<bool, N> w{};
      const auto& arguments = handle().schema().arguments();
      TORCH_INTERNAL_ASSERT(arguments.size() == N, Op::name, ": schema and signature differ");
      for (size_t i = 0; i < N; ++i) {
        w[i] = arguments[i].alias_info() != nullptr && arguments[i].alias_info()->isWrite();
      }
      return w;
    }();
    return written;
  }

  // The kernel accounting of one call (when accounting is on), also for a
  // native kernel that does this op's work another way (scalar_tensor).
  static void account(Args... args) {
    if (!accounting_enabled()) {
      return;
    }
    static_assert(N <= 64, "argument masks cover 64 arguments");
    const ArgumentMasks masks = argument_masks(handle().schema());
    KeyBuilder key;
    size_t i = 0;
    // Left to right (a fold over the comma operator), as the boxed key.
    ((key_arg(key, args, ((masks.is_static >> i) & 1) != 0, ((masks.is_out >> i) & 1) != 0),
      ++i),
     ...);
    account_call(handle(), key, [&] { return c10::impl::boxArgs<Args...>(args...); });
  }

  static Ret call(Args... args) {
    Call<N> call(written());
    std::tuple<Args...> mapped{call.map(args)...};
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
