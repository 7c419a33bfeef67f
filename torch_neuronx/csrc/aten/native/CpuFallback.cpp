// Eager execution: a boxed fallback that runs PyTorch's CPU kernel in place
// on the device memory.
//
// Every ATen op without a neuron kernel lands here. Neuron arguments are
// replaced by zero-copy CPU aliases, the CPU kernel runs, and results are
// mapped back:
//   * a returned argument (in-place / out=)      -> the original neuron tensor
//   * a view of an argument's memory             -> a neuron view of the same storage
//   * fresh memory allocated by the CPU kernel   -> adopted as neuron memory
// so aliasing, in-place updates through views and autograd's version
// counters behave exactly as PyTorch expects, with no per-op copies.
//
// One call, in named steps: check_implemented, alias_arguments (aliasing,
// device notes, generator argument), check_devices, account_kernel, run
// (the CPU kernel, or a random op drawn from the neuron generator), then
// sync_written_args and map_results; with the precision transforms on, a
// PrecisionCall swaps and rounds around the kernel.
#include "aten/native/CpuFallback.h"

#include "aten/native/Call.h"
#include "aten/native/CounterRandom.h"
#include "aten/native/GeneratorLease.h"
#include "accounting/Accounting.h"
#include "runtime/Generators.h"
#include "runtime/HostPool.h"

#include <c10/util/SmallVector.h>

#include <sstream>

namespace torch_neuronx::native {
namespace {

// The arguments of one call on the stack, and what aliasing them found.
struct FallbackCall {
  FallbackCall(const c10::OperatorHandle& op, torch::jit::Stack& stack)
      : op(op), stack(stack), begin(stack.size() - op.schema().arguments().size()) {}

  const c10::OperatorHandle& op;
  torch::jit::Stack& stack;
  size_t begin; // position of the first argument
  CallState state;
  // The caller's neuron tensors, taken out of the stack (moved, not copied)
  // and kept alive until the results are mapped back.
  c10::SmallVector<at::Tensor, 4> originals;
  std::optional<size_t> generator_pos; // the slot of a neuron or absent generator argument
};

// An op with neither a neuron kernel nor a CPU kernel (CUDA-only ops such as
// _thnn_fused_gru_cell or _flash_attention_forward) cannot run. Raise the
// real product's NotImplementedError ("Operation <op> is not implemented for
// Neuron. Args: [...]", TR python_ops/base.py:809-818) before any
// argument is touched, so nothing is written, counted or tracked.
void check_implemented(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  if (op.hasComputedKernelForDispatchKey(c10::DispatchKey::CPU)) {
    return;
  }
  const auto& name = op.schema().operator_name();
  std::ostringstream message;
  message << "Operation " << name.name.substr(name.name.rfind(':') + 1)
          << (name.overload_name.empty() ? "" : ".") << name.overload_name
          << " is not implemented for Neuron. Args: [";
  const size_t n = op.schema().arguments().size();
  for (size_t i = 0; i < n; ++i) {
    const auto& value = stack[stack.size() - n + i];
    message << (i ? ", " : "") << "arg" << i << ": ";
    if (value.isTensor() && value.toTensor().defined()) {
      const auto& t = value.toTensor();
      message << "Tensor(shape=" << t.sizes() << ", dtype=" << t.scalar_type()
              << ", device=" << t.device() << ")";
    } else {
      message << value.tagKind() << "=" << value;
    }
  }
  message << "]. Kwargs: []. Details: the op has no Neuron kernel and no CPU kernel "
          << "for the CPU fallback";
  TORCH_CHECK_NOT_IMPLEMENTED(false, message.str());
}

bool is_generator(const c10::Argument& arg) {
  const auto& type = arg.type();
  return type->kind() == c10::TypeKind::OptionalType &&
      type->castRaw<c10::OptionalType>()->getElementType()->kind() == c10::TypeKind::GeneratorType;
}

// Replace neuron tensors (also inside lists) by CPU aliases and neuron
// devices by CPU, noting devices and the generator argument on the way.
void alias_arguments(FallbackCall& call) {
  const auto& arguments = call.op.schema().arguments();
  auto& state = call.state;
  for (size_t i = 0; i < arguments.size(); ++i) {
    auto& value = call.stack[call.begin + i];
    const auto& arg = arguments[i];
    const Access access = arg.alias_info() != nullptr && arg.alias_info()->isWrite()
        ? Access::kWrite
        : Access::kRead;
    if (value.isTensor()) {
      if (is_neuron(value.toTensor())) {
        call.originals.push_back(std::move(value).toTensor());
        value = *state.alias(call.originals.back(), access);
      } else {
        state.note_other(value.toTensor());
      }
    } else if (value.isTensorList()) {
      auto list = value.toTensorList();
      for (size_t j = 0; j < list.size(); ++j) {
        at::Tensor t = list.get(j);
        if (is_neuron(t)) {
          list.set(j, *state.alias(t, access));
          call.originals.push_back(std::move(t));
        } else {
          state.note_other(t);
        }
      }
    } else if (value.isList()) {
      // Optional-tensor lists are index lists; CPU indices are allowed there,
      // as on CUDA.
      auto list = value.toList();
      for (size_t j = 0; j < list.size(); ++j) {
        c10::IValue element = list.get(j);
        // Python indexing (x[:, idx]) passes undefined tensors, not None,
        // for the sliced dimensions: they have no device to ask for.
        if (element.isTensor() && is_neuron(element.toTensor())) {
          list.set(j, *state.alias(element.toTensor(), access));
          call.originals.push_back(std::move(element).toTensor());
        }
      }
    } else if (value.isDevice()) {
      const auto d = value.toDevice();
      if (d.type() == kNeuron) {
        state.note_device(c10::Device(kNeuron, d.has_index() ? d.index() : current_device()));
        value = c10::IValue(c10::Device(c10::DeviceType::CPU));
      }
    } else if (value.isGenerator()) {
      if (value.toGenerator().device().type() == kNeuron) {
        call.generator_pos = call.begin + i;
      }
    } else if (value.isNone() && is_generator(arg)) {
      call.generator_pos = call.begin + i;
    }
  }
}

void run_on_cpu(FallbackCall& call) {
  HostPoolScope scope;
  call.op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), &call.stack);
}

// The most elements a result of the call holds: what a random op drew.
int64_t drawn_elements(const FallbackCall& call) {
  int64_t most = 0;
  const size_t num_returns = call.op.schema().returns().size();
  for (size_t i = call.stack.size() - num_returns; i < call.stack.size(); ++i) {
    if (call.stack[i].isTensor()) {
      most = std::max(most, call.stack[i].toTensor().numel());
    }
  }
  return most;
}

// A random op draws from the neuron generator (runtime/Generators.h): the one
// passed, or the default generator of the op's core. Ops whose values it gives
// element by element run in CounterRandom.cpp; any other gets a CPU generator
// seeded from it (GeneratorLease.h). A CPU generator passed explicitly goes
// to the CPU kernel unchanged.
void run_random(FallbackCall& call) {
  c10::IValue* slot = call.generator_pos ? &call.stack[*call.generator_pos] : nullptr;
  const at::Generator gen = slot && slot->isGenerator()
      ? slot->toGenerator()
      : default_generator(call.state.device().value_or(current_device()));
  {
    HostPoolScope scope;
    if (native::run_counter_random(call.op, call.stack, call.begin, gen)) {
      return;
    }
  }
  if (!slot) { // native_dropout that draws nothing (evaluation, empty input)
    run_on_cpu(call);
    return;
  }
  GeneratorLease lease;
  *slot = c10::IValue(lease.lend(gen));
  run_on_cpu(call);
  lease.finish(drawn_elements(call));
}

// The op's core generator holds a DTensor shard index: the op runs inside
// DTensor's RNG region (distributed/dtensor_random.py).
bool in_dtensor_region(const FallbackCall& call) {
  at::Generator gen = default_generator(call.state.device().value_or(current_device()));
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get<NeuronGenerator>()->drawing_a_shard();
}

// Which generator a random op (a generator argument, or native_dropout, which
// draws without one) draws from. The real product's rule, the default source:
// the CPU default generator. The neuron generator under the counter source,
// when passed to the op, or inside DTensor's RNG region, which restores the CPU
// generator after each op, so CPU draws there would repeat.
bool draws_from_neuron(const FallbackCall& call) {
  if (C10_LIKELY(!call.generator_pos && !native::is_native_dropout(call.op))) {
    return false;
  }
  return counter_draws() || (call.generator_pos && call.stack[*call.generator_pos].isGenerator()) ||
      in_dtensor_region(call);
}

void run(FallbackCall& call) {
  if (C10_UNLIKELY(draws_from_neuron(call))) {
    run_random(call);
  } else {
    run_on_cpu(call);
  }
}

// Results (on top of the stack now) back to the device.
void map_results(FallbackCall& call) {
  const size_t num_returns = call.op.schema().returns().size();
  auto& stack = call.stack;
  for (size_t i = stack.size() - num_returns; i < stack.size(); ++i) {
    auto& value = stack[i];
    if (value.isTensor()) {
      value = call.state.to_neuron(at::Tensor(value.toTensor())); // the stack keeps it too
    } else if (value.isTensorList()) {
      auto list = value.toTensorList();
      for (size_t j = 0; j < list.size(); ++j) {
        list.set(j, call.state.to_neuron(at::Tensor(list.get(j))));
      }
    }
  }
}

} // namespace

void neuron_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  check_implemented(op, *stack);
  FallbackCall call(op, *stack);
  // The chip's rounding and auto-cast (numerics/Precision.h): decided on the
  // neuron arguments, applied to their aliases after the kernel is accounted.
  std::optional<PrecisionCall> precision;
  if (C10_UNLIKELY(precision_transforms_active())) {
    precision.emplace(op, *stack, call.begin);
    if (precision->active()) {
      call.state.set_precision(&*precision);
    } else {
      precision.reset();
    }
  }
  alias_arguments(call);
  call.state.check_devices(op.schema().operator_name());
  if (accounting_enabled()) {
    account_kernel(op, *stack);
  }
  if (precision) {
    precision->before_run(*stack);
  }
  run(call);
  if (precision) {
    precision->after_run(*stack, op.schema().returns().size());
  }
  call.state.sync_written_args();
  map_results(call);
}

} // namespace torch_neuronx::native
