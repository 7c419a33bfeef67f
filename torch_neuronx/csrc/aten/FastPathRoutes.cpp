// Route table: the hottest ops, run by unboxed kernels (native/FastPath.h).
//
// The boxed fallback boxes every argument into an IValue stack, and copying
// a tensor Python owns takes the GIL; for the ops that dominate eager
// training and generation these kernels skip the boxing, with the same
// aliasing, accounting and result mapping as the fallback.
#include "aten/Routes.h"
#include "aten/native/FastPath.h"

#include <torch/library.h>

#include <cstring>

namespace torch_neuronx {
namespace {

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
  m.impl(name.substr(std::strlen("aten::")).c_str(), TORCH_FN(native::FastKernel<Op>::call));
  registered().push_back(std::move(name));
}

} // namespace

std::vector<std::string> fast_path_ops() {
  return registered();
}

// Chosen from the kernels of a tiny Llama's training step and of greedy
// generation (torch_neuronx.metrics()["kernels"]["per_op"]), plus their
// common siblings. Each one has a CPU kernel and no random draws; an out=
// variant is listed only where it is the op's kernel (arange).
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
  // static-cache decoding: cache writes, indexing, mask construction,
  // attention and the stopping criteria
  register_fast<at::_ops::index_copy_>(m);
  register_fast<at::_ops::index_Tensor>(m);
  register_fast<at::_ops::index_put_>(m);
  register_fast<at::_ops::le_Tensor>(m);
  register_fast<at::_ops::arange_start_out>(m); // torch.arange: allocate, then fill out=
  register_fast<at::_ops::cumsum>(m);
  register_fast<at::_ops::all>(m);
  register_fast<at::_ops::any>(m);
  register_fast<at::_ops::_scaled_dot_product_flash_attention_for_cpu>(m);
}

} // namespace torch_neuronx
