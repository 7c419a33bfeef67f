// The hottest TensorIterator ops run on neuron memory itself: add, mul (and
// their in-place forms), fill_, neg, rsqrt, silu, pow.Tensor_Scalar.
//
// Neuron memory is host memory, so ATen's own structured kernel can run on
// the neuron tensors directly: TensorIterator builds over them, a result is
// allocated by the device allocator (charged like any neuron tensor), and the
// op's stub, called with PrivateUse1, is registered below as the CPU kernel.
// This skips the fast path's per-call CPU aliases, device bookkeeping and
// result adoption (FastPath.h), the functions whose instruction-cache misses
// make up a decode step's gap (docs/benchmarks.md, eighth round). Accounting
// is the fast path's own (FastKernel<Op>::account), so keys and charges are
// unchanged.
//
// A call goes through the fast path unchanged when running ATen's kernel here
// could differ from CPU: operands of another dtype (a TensorIterator whose
// device is not the CPU does not cast its inputs, while the CPU kernels read
// every operand as the common dtype; only a Python number with float32 is
// cast here, as CPU would), 64-bit values (the fast path narrows them), and
// devices other than one neuron device plus 0-dim CPU tensors (the fast path
// raises the usual mixed-device error).
//
// Compiled on its own (in no unity unit of setup.py): it declares the CPU
// kernel variants libtorch is built with on x86-64 before any PyTorch header,
// so that calling a stub links against the DispatchStubImpl functions libtorch
// exports (their signature lists one pointer per variant). On other machines
// the file is empty and these ops keep the fast path (Native.h).
#if defined(__x86_64__)
#define HAVE_AVX512_CPU_DEFINITION
#define HAVE_AVX2_CPU_DEFINITION
#endif
#include "aten/native/Native.h"

#ifdef TORCH_NEURONX_TENSOR_ITERATOR_OPS_ON_DEVICE
#include "aten/native/FastPath.h"

#include <ATen/EmptyTensor.h>
#include <ATen/native/Activation.h>
#include <ATen/native/BinaryOps.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/Fill.h>
#include <ATen/native/Pow.h>
#include <ATen/native/UnaryOps.h>
#include <ATen/ops/add_native.h>
#include <ATen/ops/fill_native.h>
#include <ATen/ops/mul_native.h>
#include <ATen/ops/neg_native.h>
#include <ATen/ops/pow_native.h>
#include <ATen/ops/rsqrt_native.h>
#include <ATen/ops/silu_native.h>

namespace torch_neuronx::native {
namespace {

// ATen's kernels call their stub with iter.device_type(), here PrivateUse1:
// each runs the CPU kernel (the host memory is the device's).
void add_on_host(at::TensorIteratorBase& iter, const c10::Scalar& alpha) {
  at::native::add_stub(c10::DeviceType::CPU, iter, alpha);
}
void mul_on_host(at::TensorIteratorBase& iter) {
  at::native::mul_stub(c10::DeviceType::CPU, iter);
}
void fill_on_host(at::TensorIterator& iter, const c10::Scalar& value) {
  at::native::fill_stub(c10::DeviceType::CPU, iter, value);
}
void neg_on_host(at::TensorIteratorBase& iter) {
  at::native::neg_stub(c10::DeviceType::CPU, iter);
}
void rsqrt_on_host(at::TensorIteratorBase& iter) {
  at::native::rsqrt_stub(c10::DeviceType::CPU, iter);
}
void silu_on_host(at::TensorIteratorBase& iter) {
  at::native::silu_stub(c10::DeviceType::CPU, iter);
}
void pow_on_host(at::TensorIteratorBase& iter, const c10::Scalar& exponent) {
  at::native::pow_tensor_scalar_stub(c10::DeviceType::CPU, iter, exponent);
}

bool is_64bit(c10::ScalarType type) {
  return type == at::kLong || type == at::kDouble;
}

// A unary float op's iterator promotes integer inputs to float, which only
// CPU's iterator does: only float32/bf16/f16 inputs run here.
bool is_narrow_float(const at::Tensor& self) {
  return self.is_floating_point() && self.scalar_type() != at::kDouble;
}

// The operand ATen's kernel on the device memory gets for `other`, or nullptr
// when only the fast path computes what CPU would (see the top of this file).
// One more case runs here: a float32 `self` with a 0-dim CPU float64 or int64
// `other` (a Python number): CPU's iterator casts it to float32 before its
// kernel runs, and so does this function, into `cast`. (Reduced-precision
// kernels read such a scalar at its own precision: those take the fast path.)
const at::Tensor* direct_operand(const at::Tensor& self, const at::Tensor& other,
                                 at::Tensor& cast) {
  const auto type = self.scalar_type();
  if (is_64bit(type) || !is_neuron(self)) {
    return nullptr;
  }
  if (is_neuron(other)) {
    return other.scalar_type() == type && other.device().index() == self.device().index()
        ? &other
        : nullptr;
  }
  if (!other.device().is_cpu() || other.dim() != 0) {
    return nullptr;
  }
  if (other.scalar_type() == type) {
    return &other;
  }
  if (type != at::kFloat || !is_64bit(other.scalar_type())) {
    return nullptr;
  }
  cast = at::detail::empty_cpu({}, at::kFloat, std::nullopt, std::nullopt, std::nullopt,
                               std::nullopt);
  *cast.mutable_data_ptr<float>() = other.scalar_type() == at::kDouble
      ? static_cast<float>(*other.const_data_ptr<double>())
      : static_cast<float>(*other.const_data_ptr<int64_t>());
  return &cast;
}

// A structured kernel computing into a new device tensor (as PyTorch's
// generated functional wrappers, with the device's allocator).
template <class Kernel>
struct Functional final : Kernel {
  void set_output_raw_strided(int64_t index, at::IntArrayRef sizes, at::IntArrayRef strides,
                              at::TensorOptions options) override {
    // No strides: the iterator asks for a memory format (in `options`).
    const auto dtype = options.dtype().toScalarType();
    output = strides.empty()
        ? empty_memory_format(sizes, dtype, std::nullopt, options.device(), std::nullopt,
                              options.memory_format_opt())
        : empty_strided(sizes, strides, dtype, std::nullopt, options.device(), std::nullopt);
    // The iterator takes the output from maybe_get_output, so after it is set.
    Kernel::set_output_raw_strided(index, sizes, strides, options);
  }
  const at::Tensor& maybe_get_output(int64_t) override {
    return output;
  }
  at::Tensor output;
};

// A structured kernel writing into `self` (TensorIterator checks its shape
// and dtype against the operands).
template <class Kernel>
struct InPlace final : Kernel {
  explicit InPlace(at::Tensor& self) : self(self) {}
  const at::Tensor& maybe_get_output(int64_t) override {
    return self;
  }
  at::Tensor& self;
};

// Structured `Kernel`'s meta and impl on `args`, into a new device tensor.
template <class Kernel, class... Args>
at::Tensor run(const Args&... args) {
  Functional<Kernel> op;
  op.meta(args...);
  op.impl(args..., op.output);
  return std::move(op.output);
}

// The same, writing into `self`.
template <class Kernel, class... Args>
at::Tensor& run_in_place(at::Tensor& self, const Args&... args) {
  InPlace<Kernel> op(self);
  op.meta(self, args...);
  op.impl(self, args..., self);
  return self;
}

} // namespace

at::Tensor add(const at::Tensor& self, const at::Tensor& other, const c10::Scalar& alpha) {
  using Fast = FastKernel<at::_ops::add_Tensor>;
  at::Tensor cast;
  const at::Tensor* operand = direct_operand(self, other, cast);
  if (operand == nullptr) {
    return Fast::call(self, other, alpha);
  }
  Fast::account(self, other, alpha);
  return run<at::native::structured_ufunc_add_CPU>(self, *operand, alpha);
}

at::Tensor& add_(at::Tensor& self, const at::Tensor& other, const c10::Scalar& alpha) {
  using Fast = FastKernel<at::_ops::add__Tensor>;
  at::Tensor cast;
  const at::Tensor* operand = direct_operand(self, other, cast);
  if (operand == nullptr) {
    return Fast::call(self, other, alpha);
  }
  Fast::account(self, other, alpha);
  return run_in_place<at::native::structured_ufunc_add_CPU>(self, *operand, alpha);
}

at::Tensor mul(const at::Tensor& self, const at::Tensor& other) {
  using Fast = FastKernel<at::_ops::mul_Tensor>;
  at::Tensor cast;
  const at::Tensor* operand = direct_operand(self, other, cast);
  if (operand == nullptr) {
    return Fast::call(self, other);
  }
  Fast::account(self, other);
  return run<at::native::structured_mul_out>(self, *operand);
}

at::Tensor& mul_(at::Tensor& self, const at::Tensor& other) {
  using Fast = FastKernel<at::_ops::mul__Tensor>;
  at::Tensor cast;
  const at::Tensor* operand = direct_operand(self, other, cast);
  if (operand == nullptr) {
    return Fast::call(self, other);
  }
  Fast::account(self, other);
  return run_in_place<at::native::structured_mul_out>(self, *operand);
}

at::Tensor& fill_(at::Tensor& self, const c10::Scalar& value) {
  using Fast = FastKernel<at::_ops::fill__Scalar>;
  if (is_64bit(self.scalar_type())) {
    return Fast::call(self, value);
  }
  Fast::account(self, value);
  return at::native::fill_(self, value);
}

at::Tensor neg(const at::Tensor& self) {
  using Fast = FastKernel<at::_ops::neg>;
  if (is_64bit(self.scalar_type())) {
    return Fast::call(self);
  }
  Fast::account(self);
  return run<at::native::structured_neg_out>(self);
}

at::Tensor rsqrt(const at::Tensor& self) {
  using Fast = FastKernel<at::_ops::rsqrt>;
  if (!is_narrow_float(self)) {
    return Fast::call(self);
  }
  Fast::account(self);
  return run<at::native::structured_rsqrt_out>(self);
}

at::Tensor silu(const at::Tensor& self) {
  using Fast = FastKernel<at::_ops::silu>;
  if (!is_narrow_float(self)) {
    return Fast::call(self);
  }
  Fast::account(self);
  return run<at::native::structured_silu_out>(self);
}

// A real exponent keeps a float base's dtype; a complex one makes a complex
// result, which the iterator here would not cast into.
at::Tensor pow(const at::Tensor& self, const c10::Scalar& exponent) {
  using Fast = FastKernel<at::_ops::pow_Tensor_Scalar>;
  if (!is_narrow_float(self) || exponent.isComplex()) {
    return Fast::call(self, exponent);
  }
  Fast::account(self, exponent);
  return run<at::native::structured_pow_Tensor_Scalar_out>(self, exponent);
}

} // namespace torch_neuronx::native

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(add_stub, &torch_neuronx::native::add_on_host)
REGISTER_PRIVATEUSE1_DISPATCH(mul_stub, &torch_neuronx::native::mul_on_host)
REGISTER_PRIVATEUSE1_DISPATCH(fill_stub, &torch_neuronx::native::fill_on_host)
REGISTER_PRIVATEUSE1_DISPATCH(neg_stub, &torch_neuronx::native::neg_on_host)
REGISTER_PRIVATEUSE1_DISPATCH(rsqrt_stub, &torch_neuronx::native::rsqrt_on_host)
REGISTER_PRIVATEUSE1_DISPATCH(silu_stub, &torch_neuronx::native::silu_on_host)
REGISTER_PRIVATEUSE1_DISPATCH(pow_tensor_scalar_stub, &torch_neuronx::native::pow_on_host)
} // namespace at::native

#endif // TORCH_NEURONX_TENSOR_ITERATOR_OPS_ON_DEVICE
