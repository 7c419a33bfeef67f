// The hottest TensorIterator ops run on neuron memory itself.
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
// kernel variants libtorch is built with on x86 before any PyTorch header, so
// that calling a stub links against the DispatchStubImpl functions libtorch
// exports (their signature lists one pointer per variant).
#if defined(__x86_64__)
#define HAVE_AVX512_CPU_DEFINITION
#define HAVE_AVX2_CPU_DEFINITION
#endif
#include "aten/native/FastPath.h"
#include "aten/native/Native.h"

#include <ATen/EmptyTensor.h>
#include <ATen/native/BinaryOps.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/Fill.h>
#include <ATen/ops/add_native.h>
#include <ATen/ops/fill_native.h>
#include <ATen/ops/mul_native.h>

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

bool is_64bit(c10::ScalarType type) {
  return type == at::kLong || type == at::kDouble;
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

} // namespace

at::Tensor add(const at::Tensor& self, const at::Tensor& other, const c10::Scalar& alpha) {
  using Fast = FastKernel<at::_ops::add_Tensor>;
  at::Tensor cast;
  const at::Tensor* operand = direct_operand(self, other, cast);
  if (operand == nullptr) {
    return Fast::call(self, other, alpha);
  }
  Fast::account(self, other, alpha);
  Functional<at::native::structured_ufunc_add_CPU> op;
  op.meta(self, *operand, alpha);
  op.impl(self, *operand, alpha, op.output);
  return std::move(op.output);
}

at::Tensor& add_(at::Tensor& self, const at::Tensor& other, const c10::Scalar& alpha) {
  using Fast = FastKernel<at::_ops::add__Tensor>;
  at::Tensor cast;
  const at::Tensor* operand = direct_operand(self, other, cast);
  if (operand == nullptr) {
    return Fast::call(self, other, alpha);
  }
  Fast::account(self, other, alpha);
  InPlace<at::native::structured_ufunc_add_CPU> op(self);
  op.meta(self, *operand, alpha);
  op.impl(self, *operand, alpha, self);
  return self;
}

at::Tensor mul(const at::Tensor& self, const at::Tensor& other) {
  using Fast = FastKernel<at::_ops::mul_Tensor>;
  at::Tensor cast;
  const at::Tensor* operand = direct_operand(self, other, cast);
  if (operand == nullptr) {
    return Fast::call(self, other);
  }
  Fast::account(self, other);
  Functional<at::native::structured_mul_out> op;
  op.meta(self, *operand);
  op.impl(self, *operand, op.output);
  return std::move(op.output);
}

at::Tensor& mul_(at::Tensor& self, const at::Tensor& other) {
  using Fast = FastKernel<at::_ops::mul__Tensor>;
  at::Tensor cast;
  const at::Tensor* operand = direct_operand(self, other, cast);
  if (operand == nullptr) {
    return Fast::call(self, other);
  }
  Fast::account(self, other);
  InPlace<at::native::structured_mul_out> op(self);
  op.meta(self, *operand);
  op.impl(self, *operand, self);
  return self;
}

at::Tensor& fill_(at::Tensor& self, const c10::Scalar& value) {
  using Fast = FastKernel<at::_ops::fill__Scalar>;
  if (is_64bit(self.scalar_type())) {
    return Fast::call(self, value);
  }
  Fast::account(self, value);
  return at::native::fill_(self, value);
}

} // namespace torch_neuronx::native

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(add_stub, &torch_neuronx::native::add_on_host)
REGISTER_PRIVATEUSE1_DISPATCH(mul_stub, &torch_neuronx::native::mul_on_host)
REGISTER_PRIVATEUSE1_DISPATCH(fill_stub, &torch_neuronx::native::fill_on_host)
} // namespace at::native
