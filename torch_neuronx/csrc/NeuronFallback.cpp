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
#include "NeuronCall.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <c10/util/SmallVector.h>

namespace torch_neuronx {
namespace {

bool is_generator_arg(const c10::Argument& arg) {
  const auto& type = arg.type();
  if (type->kind() == c10::TypeKind::GeneratorType) {
    return true;
  }
  if (auto opt = type->cast<c10::OptionalType>()) {
    return opt->getElementType()->kind() == c10::TypeKind::GeneratorType;
  }
  return false;
}

// A CPU generator per thread that borrows a neuron generator's state for one
// call: CPU kernels only accept CPU generators.
const at::Generator& scratch_generator() {
  thread_local at::Generator gen = at::make_generator<at::CPUGeneratorImpl>();
  return gen;
}

void copy_generator_state(at::CPUGeneratorImpl& from, at::CPUGeneratorImpl& to) {
  to.set_engine(from.engine());
  to.set_next_float_normal_sample(from.next_float_normal_sample());
  to.set_next_double_normal_sample(from.next_double_normal_sample());
}

// Random ops without a generator argument (native_dropout, the dropout of
// CPU flash attention) draw from the CPU default generator inside the CPU
// kernel. For the call, that generator holds the core's state, so dropout on
// neuron follows torch.neuron.manual_seed and leaves the CPU stream alone.
// (Its mutex cannot be held across the kernel, which locks it itself.)
class BorrowedDefaultGenerator {
 public:
  // Where the CPU generator's own state waits during a borrow: one per
  // thread, since constructing a generator (a Mersenne Twister state) on
  // every call costs more than many kernels.
  static at::CPUGeneratorImpl& saved_state() {
    thread_local at::CPUGeneratorImpl saved;
    return saved;
  }

  explicit BorrowedDefaultGenerator(at::CPUGeneratorImpl* neuron)
      : neuron_(neuron),
        cpu_(at::detail::getDefaultCPUGenerator().get<at::CPUGeneratorImpl>()) {
    std::lock_guard<std::mutex> lock(cpu_->mutex_);
    copy_generator_state(*cpu_, saved_);
    copy_generator_state(*neuron_, *cpu_);
  }
  ~BorrowedDefaultGenerator() {
    std::lock_guard<std::mutex> lock(cpu_->mutex_);
    copy_generator_state(*cpu_, *neuron_);
    copy_generator_state(saved_, *cpu_);
  }

 private:
  at::CPUGeneratorImpl* neuron_;
  at::CPUGeneratorImpl* cpu_;
  at::CPUGeneratorImpl& saved_ = saved_state();
};

// Attention kernels are tagged random for their dropout; with dropout_p == 0
// (inference, most fine-tuning) they draw nothing, and borrowing the
// generator (four copies of a Mersenne Twister state) would cost more than a
// small attention call.
bool dropout_disabled(
    const std::vector<c10::Argument>& arguments,
    const torch::jit::Stack& stack,
    size_t begin) {
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (arguments[i].name() == "dropout_p") {
      const auto& value = stack[begin + i];
      return value.isDouble() && value.toDouble() == 0.0;
    }
  }
  return false;
}

void neuron_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const auto& arguments = schema.arguments();
  const size_t num_args = arguments.size();
  const size_t begin = stack->size() - num_args;
  CallState state;
  // The caller's neuron tensors, taken out of the stack (moved, not copied)
  // and kept alive until the results are mapped back.
  c10::SmallVector<at::Tensor, 4> originals;
  at::Generator neuron_generator;
  std::optional<size_t> generator_pos; // slot to receive the scratch generator

  for (size_t i = 0; i < num_args; ++i) {
    auto& value = (*stack)[begin + i];
    const auto& arg = arguments[i];
    const bool is_write = arg.alias_info() != nullptr && arg.alias_info()->isWrite();
    if (value.isTensor()) {
      if (is_neuron(value.toTensor())) {
        originals.push_back(std::move(value).toTensor());
        value = state.alias(originals.back(), is_write);
      } else {
        state.note_other(value.toTensor());
      }
    } else if (value.isTensorList()) {
      auto list = value.toTensorList();
      for (size_t j = 0; j < list.size(); ++j) {
        at::Tensor t = list.get(j);
        if (is_neuron(t)) {
          list.set(j, state.alias(t, is_write));
          originals.push_back(std::move(t));
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
          list.set(j, state.alias(element.toTensor(), is_write));
          originals.push_back(std::move(element).toTensor());
        }
      }
    } else if (value.isDevice()) {
      const auto d = value.toDevice();
      if (d.type() == kNeuron) {
        state.note_device(c10::Device(kNeuron, d.has_index() ? d.index() : current_device()));
        value = c10::IValue(c10::Device(c10::DeviceType::CPU));
      }
    } else if (value.isGenerator()) {
      auto gen = value.toGenerator();
      if (gen.device().type() == kNeuron) {
        neuron_generator = gen;
        generator_pos = begin + i;
      }
    } else if (value.isNone() && is_generator_arg(arg)) {
      generator_pos = begin + i;
    }
  }

  state.check_devices(schema.operator_name());

  // Random ops draw from the core's own generator, as CUDA ops do.
  std::unique_lock<std::mutex> generator_lock;
  at::CPUGeneratorImpl* neuron_gen = nullptr;
  if (generator_pos) {
    if (!neuron_generator.defined() && state.device()) {
      neuron_generator = default_generator(*state.device());
    }
    if (neuron_generator.defined()) {
      neuron_gen = neuron_generator.get<at::CPUGeneratorImpl>();
      generator_lock = std::unique_lock<std::mutex>(neuron_generator.mutex());
      copy_generator_state(*neuron_gen, *scratch_generator().get<at::CPUGeneratorImpl>());
      (*stack)[*generator_pos] = c10::IValue(scratch_generator());
    }
  }

  std::optional<BorrowedDefaultGenerator> borrowed_default;
  if (!generator_pos && state.device() && op.hasTag(at::Tag::nondeterministic_seeded) &&
      !dropout_disabled(arguments, *stack, begin)) {
    neuron_generator = default_generator(*state.device());
    generator_lock = std::unique_lock<std::mutex>(neuron_generator.mutex());
    borrowed_default.emplace(neuron_generator.get<at::CPUGeneratorImpl>());
  }

  if (accounting_enabled()) {
    account_kernel(op, *stack);
  }

  {
    HostPoolScope scope;
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
  }

  borrowed_default.reset();
  if (neuron_gen != nullptr) {
    copy_generator_state(*scratch_generator().get<at::CPUGeneratorImpl>(), *neuron_gen);
  }
  state.sync_written_args();

  const size_t num_returns = schema.returns().size();
  const size_t rbegin = stack->size() - num_returns;
  for (size_t i = rbegin; i < stack->size(); ++i) {
    auto& value = (*stack)[i];
    if (value.isTensor()) {
      value = state.to_neuron(value.toTensor());
    } else if (value.isTensorList()) {
      auto list = value.toTensorList();
      for (size_t j = 0; j < list.size(); ++j) {
        list.set(j, state.to_neuron(list.get(j)));
      }
    }
  }
}

} // namespace

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&neuron_fallback>());
}

// Structured ops (add, mul, ...) reach a device without its own kernel through
// PyTorch's CompositeExplicitAutogradNonFunctional wrapper: it allocates the
// result on the device, then runs the `out=` kernel, so the fallback pays for
// an extra allocation, an extra alias and an out= sync. Routing such ops
// straight to the fallback runs CPU's functional/in-place kernel instead, whose
// result is adopted. Called once from Python after every other registration;
// ops that already have a neuron kernel keep it.
int64_t route_structured_ops_to_fallback() {
  static auto* library = new torch::Library(
      torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  auto& dispatcher = c10::Dispatcher::singleton();
  int64_t routed = 0;
  for (const auto& name : dispatcher.getAllOpNames()) {
    if (name.name.rfind("aten::", 0) != 0) {
      continue;
    }
    auto op = dispatcher.findOp(name);
    if (!op ||
        !op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional) ||
        !op->hasKernelForDispatchKey(c10::DispatchKey::CPU) ||
        op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) {
      continue;
    }
    const std::string qualified = name.overload_name.empty()
        ? name.name
        : name.name + "." + name.overload_name;
    library->impl(qualified.c_str(),
                  torch::CppFunction::makeFromBoxedFunction<&neuron_fallback>());
    ++routed;
  }
  return routed;
}

} // namespace torch_neuronx

namespace torch_neuronx {

// These ops have a CPU kernel and also a device-generic decomposition
// (CompositeExplicitAutograd), which PyTorch would pick for neuron. Sending
// them to the fallback runs the CPU kernel instead, so results match CPU bit
// for bit (layer_norm/group_norm in bfloat16 differ noticeably otherwise).
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const char* name :
       {"native_layer_norm", "native_group_norm", "addr", "addr.out", "_stack",
        "_stack.out", "all.dims", "all.dims_out", "any.dims", "any.dims_out",
        "linalg__powsum"}) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&neuron_fallback>());
  }
}

} // namespace torch_neuronx
