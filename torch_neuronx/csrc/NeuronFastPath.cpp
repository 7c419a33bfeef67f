// The unboxed fast path: the hottest ops without boxing.
//
// The boxed fallback pays for its generality on every call: the dispatcher
// copies each argument into an IValue stack (for a tensor Python owns, that
// copy takes the GIL, see NeuronCall.h), the schema is walked argument by
// argument and the CPU kernel is reached by a boxed redispatch. For the ops
// that dominate eager training and generation (pointwise math, reductions,
// matmuls, softmax, cat, ...) this file registers unboxed kernels instead,
// generated from each op's C++ signature (`at::_ops::<op>::schema`): neuron
// arguments are aliased without copying the caller's tensors, the CPU kernel
// is called unboxed, and written arguments and results go through the same
// CallState as in the fallback, so behaviour is identical. Random ops and
// out= variants stay on the fallback.
#include "NeuronCall.h"

#include <ATen/Operators.h>
#include <ATen/core/boxing/impl/boxing.h>
#include <torch/library.h>

#include <array>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <vector>

namespace torch_neuronx {
namespace {

const c10::DispatchKeySet kCpuKeys(c10::DispatchKey::CPU);

// ---- signature hashing, argument by argument (see account_signature) -------

void mix_arg(uint64_t& h, const at::Tensor& t) {
  mix_signature_tensor(h, t);
}

void mix_arg(uint64_t& h, const std::optional<at::Tensor>& t) {
  if (t.has_value()) {
    mix_signature_tensor(h, *t); // boxing would copy the tensor
  } else {
    mix_signature_value(h, c10::IValue());
  }
}

void mix_arg(uint64_t& h, at::TensorList list) {
  for (const auto& t : list) {
    mix_signature_tensor(h, t);
  }
}

void mix_arg(uint64_t& h, const at::ITensorListRef& list) {
  for (const auto& t : list) {
    mix_signature_tensor(h, t);
  }
}

void mix_arg(uint64_t& h, at::IntArrayRef values) {
  for (auto v : values) {
    mix_signature_int(h, v);
  }
}

void mix_arg(uint64_t& h, at::OptionalIntArrayRef values) {
  if (values.has_value()) {
    mix_arg(h, *values);
  } else {
    mix_signature_value(h, c10::IValue());
  }
}

template <class T>
void mix_arg(uint64_t& h, const T& value) {
  mix_signature_value(h, c10::IValue(value));
}

// ---- one call: argument slots and result mapping ---------------------------

// The caller's arguments, mapped to what the CPU kernel sees. Arguments are
// mapped strictly left to right (braced initialisation), so `next_` is the
// position of the argument being mapped.
template <size_t N>
class Call {
 public:
  explicit Call(const std::array<bool, N>& written) : written_(written) {}

  CallState state;

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

  static Ret call(Args... args) {
    Call<N> call(written());
    std::tuple<Args...> mapped{call.map(args)...};
    call.state.check_devices(handle().operator_name());
    if (accounting_enabled()) {
      uint64_t h = kSignatureSeed;
      (mix_arg(h, args), ...);
      account_signature(handle(), h, [&] {
        const auto boxed = c10::impl::boxArgs<Args...>(args...);
        return describe_signature(handle(), boxed);
      });
    }
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

// Names of the ops registered here, for tests and docs.
std::vector<std::string>& registered() {
  static std::vector<std::string> names;
  return names;
}

template <class Op>
void register_fast(torch::Library& m) {
  std::string name = Op::name;
  if (std::strlen(Op::overload_name) > 0) {
    name = name + "." + Op::overload_name;
  }
  m.impl(name.substr(std::strlen("aten::")).c_str(), TORCH_FN(FastKernel<Op>::call));
  registered().push_back(std::move(name));
}

} // namespace

std::vector<std::string> fast_path_ops() {
  return registered();
}

// Chosen from the kernels of a tiny Llama's training step and of greedy
// generation (torch_neuronx.metrics()["kernels"]["per_op"]), plus their
// common siblings. Each one has a CPU kernel and no random draws.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  // pointwise
  register_fast<at::_ops::add_Tensor>(m);
  register_fast<at::_ops::add__Tensor>(m);
  register_fast<at::_ops::sub_Tensor>(m);
  register_fast<at::_ops::sub__Tensor>(m);
  register_fast<at::_ops::mul_Tensor>(m);
  register_fast<at::_ops::mul__Tensor>(m);
  register_fast<at::_ops::div_Tensor>(m);
  register_fast<at::_ops::div__Tensor>(m);
  register_fast<at::_ops::pow_Tensor_Scalar>(m);
  register_fast<at::_ops::neg>(m);
  register_fast<at::_ops::rsqrt>(m);
  register_fast<at::_ops::sqrt>(m);
  register_fast<at::_ops::exp>(m);
  register_fast<at::_ops::log>(m);
  register_fast<at::_ops::sin>(m);
  register_fast<at::_ops::cos>(m);
  register_fast<at::_ops::tanh>(m);
  register_fast<at::_ops::sigmoid>(m);
  register_fast<at::_ops::silu>(m);
  register_fast<at::_ops::silu_backward>(m);
  register_fast<at::_ops::relu>(m);
  register_fast<at::_ops::gelu>(m);
  register_fast<at::_ops::gelu_backward>(m);
  register_fast<at::_ops::where_self>(m);
  register_fast<at::_ops::masked_fill__Scalar>(m);
  register_fast<at::_ops::fill__Scalar>(m);
  register_fast<at::_ops::zero_>(m);
  register_fast<at::_ops::lerp__Scalar>(m);
  register_fast<at::_ops::addcmul_>(m);
  register_fast<at::_ops::addcdiv_>(m);
  register_fast<at::_ops::eq_Scalar>(m);
  register_fast<at::_ops::eq_Tensor>(m);
  register_fast<at::_ops::ne_Scalar>(m);
  register_fast<at::_ops::ne_Tensor>(m);
  register_fast<at::_ops::lt_Scalar>(m);
  register_fast<at::_ops::gt_Scalar>(m);
  register_fast<at::_ops::bitwise_and_Tensor>(m);
  register_fast<at::_ops::bitwise_or_Tensor>(m);
  register_fast<at::_ops::bitwise_not>(m);
  register_fast<at::_ops::isneginf>(m);
  register_fast<at::_ops::tril>(m);
  register_fast<at::_ops::triu>(m);
  // reductions
  register_fast<at::_ops::sum>(m);
  register_fast<at::_ops::sum_dim_IntList>(m);
  register_fast<at::_ops::mean_dim>(m);
  register_fast<at::_ops::argmax>(m);
  register_fast<at::_ops::max>(m);
  register_fast<at::_ops::all_dim>(m);
  register_fast<at::_ops::any_dim>(m);
  register_fast<at::_ops::isin_Tensor_Tensor>(m);
  // matmuls
  register_fast<at::_ops::mm>(m);
  register_fast<at::_ops::bmm>(m);
  register_fast<at::_ops::addmm>(m);
  register_fast<at::_ops::baddbmm>(m);
  // softmax, loss, embedding, concatenation
  register_fast<at::_ops::_softmax>(m);
  register_fast<at::_ops::_softmax_backward_data>(m);
  register_fast<at::_ops::_log_softmax>(m);
  register_fast<at::_ops::_log_softmax_backward_data>(m);
  register_fast<at::_ops::nll_loss_forward>(m);
  register_fast<at::_ops::nll_loss_backward>(m);
  register_fast<at::_ops::index_select>(m);
  register_fast<at::_ops::embedding_dense_backward>(m);
  register_fast<at::_ops::cat>(m);
}

} // namespace torch_neuronx
