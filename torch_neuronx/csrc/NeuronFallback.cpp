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
#include "NeuronRuntime.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <c10/util/SmallVector.h>

#include <cstring>

namespace torch_neuronx {
namespace {

// What the fallback changed in one argument slot, to undo or sync afterwards.
struct WrittenArg {
  at::Tensor original; // the neuron tensor the caller passed
  at::Tensor alias;    // the CPU alias the kernel saw
  c10::StorageImpl* alias_storage;
  void* alias_data;
};

struct CallState {
  std::optional<c10::DeviceIndex> device;
  std::optional<c10::Device> other_device; // first conflicting device seen
  // alias TensorImpl / StorageImpl -> the neuron tensor it stands for
  // Inline storage: most ops have a handful of tensor arguments, and the
  // hot path should not touch the heap for bookkeeping.
  c10::SmallVector<std::pair<c10::TensorImpl*, at::Tensor>, 4> by_tensor;
  c10::SmallVector<std::pair<c10::StorageImpl*, at::Tensor>, 4> by_storage;
  c10::SmallVector<WrittenArg, 2> written;
  at::Generator neuron_generator;

  void note_device(c10::Device d) {
    if (!device) {
      device = d.index();
    } else if (*device != d.index() && !other_device) {
      other_device = d;
    }
  }

  at::Tensor alias(const at::Tensor& t, bool is_write) {
    note_device(t.device());
    at::Tensor a = cpu_alias(t);
    by_tensor.emplace_back(a.unsafeGetTensorImpl(), t);
    by_storage.emplace_back(a.storage().unsafeGetStorageImpl(), t);
    if (is_write) {
      written.push_back({t, a, a.storage().unsafeGetStorageImpl(),
                         a.storage().mutable_data()});
    }
    return a;
  }
};

bool is_cpu_nonscalar(const at::Tensor& t) {
  return t.defined() && t.device().is_cpu() && t.dim() > 0;
}

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
  at::CPUGeneratorImpl saved_;
};

using AdoptedList = c10::SmallVector<std::pair<c10::StorageImpl*, at::Tensor>, 2>;

// Only int64/float64 values can need narrowing; checking the dtype first
// spares every other result an alias.
bool needs_narrowing(const at::Tensor& t) {
  const auto dtype = t.scalar_type();
  return (dtype == at::kLong || dtype == at::kDouble) && narrowing_mode() != 0;
}

// Map one returned CPU tensor back to the device.
at::Tensor to_neuron_result(
    const at::Tensor& out,
    CallState& state,
    AdoptedList& adopted) {
  if (!out.defined()) {
    return out;
  }
  const auto index = state.device.value_or(current_device());
  if (out._is_zerotensor()) {
    // Autograd's efficient zero tensors (e.g. the gradient of sign/round)
    // have no memory behind their shape: give the device real zeros.
    c10::DeviceGuard guard(c10::Device(kNeuron, index));
    return at::zeros(out.sizes(), out.options().device(kNeuron, index));
  }
  auto* impl = out.unsafeGetTensorImpl();
  for (auto& [alias_impl, original] : state.by_tensor) {
    if (alias_impl == impl) {
      return original;
    }
  }
  auto* storage = out.storage().unsafeGetStorageImpl();
  const at::Tensor* base = nullptr;
  for (auto& [alias_storage, original] : state.by_storage) {
    if (alias_storage == storage) {
      base = &original;
      break;
    }
  }
  if (base == nullptr) {
    for (auto& [adopted_storage, neuron] : adopted) {
      if (adopted_storage == storage) {
        base = &neuron;
        break;
      }
    }
  }
  if (base != nullptr) {
    // A view of memory that already lives on the device.
    auto view = at::detail::make_tensor<c10::TensorImpl>(
        c10::Storage(base->storage()),
        c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), out.dtype());
    view.unsafeGetTensorImpl()->set_sizes_and_strides(
        out.sizes(), out.strides(), out.storage_offset());
    return view;
  }
  at::Tensor result;
  if (out.storage().use_count() > 1) {
    // Memory the kernel shares with something else: copy, never steal.
    c10::DeviceGuard guard(c10::Device(kNeuron, index));
    result = at::empty_strided(out.sizes(), out.strides(),
                               out.options().device(kNeuron, index));
    cpu_alias(result).copy_(out);
  } else {
    result = adopt_cpu_tensor(out, index);
    adopted.emplace_back(storage, result);
  }
  if (needs_narrowing(result)) {
    narrow_64bit_inplace(cpu_alias(result));
  }
  return result;
}

// After the kernel: make each written neuron argument reflect what the
// kernel did to its alias (new size, new metadata).
void sync_written_args(CallState& state) {
  for (auto& w : state.written) {
    auto& alias = w.alias;
    auto* original = w.original.unsafeGetTensorImpl();
    const bool moved = alias.storage().unsafeGetStorageImpl() != w.alias_storage ||
        alias.storage().mutable_data() != w.alias_data;
    if (moved) {
      // The kernel gave an out= argument new memory (resize, or set_ to a
      // buffer it laid out itself, e.g. LAPACK's padded column-major
      // results). Give the neuron tensor device memory of the same size and
      // layout: the alias's strides and offset may reach beyond numel().
      const auto& fresh = alias.storage();
      c10::DeviceGuard guard(w.original.device());
      c10::Storage storage(c10::Storage::use_byte_size_t(), fresh.nbytes(), allocator(),
                           /*resizable=*/true);
      if (fresh.nbytes() > 0) {
        std::memcpy(storage.mutable_data(), fresh.data(), fresh.nbytes());
      }
      w.original.set_(storage, alias.storage_offset(), alias.sizes(), alias.strides());
    } else if (alias.sizes() != w.original.sizes() ||
               alias.strides() != w.original.strides() ||
               alias.storage_offset() != w.original.storage_offset()) {
      original->set_sizes_and_strides(
          alias.sizes(), alias.strides(), alias.storage_offset());
    }
    if (needs_narrowing(w.original)) {
      narrow_64bit_inplace(cpu_alias(w.original));
    }
  }
}

void neuron_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const auto& arguments = schema.arguments();
  const size_t num_args = arguments.size();
  const size_t begin = stack->size() - num_args;
  CallState state;
  bool cpu_tensor_mixed = false;
  std::optional<size_t> generator_pos; // slot to receive the scratch generator

  for (size_t i = 0; i < num_args; ++i) {
    auto& value = (*stack)[begin + i];
    const auto& arg = arguments[i];
    const bool is_write = arg.alias_info() != nullptr && arg.alias_info()->isWrite();
    if (value.isTensor()) {
      const auto& t = value.toTensor();
      if (t.defined() && t.device().type() == kNeuron) {
        value = state.alias(t, is_write);
      } else {
        cpu_tensor_mixed |= is_cpu_nonscalar(t);
      }
    } else if (value.isTensorList()) {
      auto list = value.toTensorList();
      for (size_t j = 0; j < list.size(); ++j) {
        at::Tensor t = list.get(j);
        if (t.defined() && t.device().type() == kNeuron) {
          list.set(j, state.alias(t, is_write));
        } else {
          cpu_tensor_mixed |= is_cpu_nonscalar(t);
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
        if (element.isTensor() && element.toTensor().defined() &&
            element.toTensor().device().type() == kNeuron) {
          list.set(j, state.alias(element.toTensor(), is_write));
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
        state.neuron_generator = gen;
        generator_pos = begin + i;
      }
    } else if (value.isNone() && is_generator_arg(arg)) {
      generator_pos = begin + i;
    }
  }

  TORCH_CHECK(
      !state.other_device && !(cpu_tensor_mixed && state.device),
      "Expected all tensors to be on the same device, but found at least two "
      "devices, neuron:", static_cast<int>(state.device.value_or(0)), " and ",
      state.other_device ? state.other_device->str() : std::string("cpu"),
      "! (while running ", schema.operator_name(), " on the neuron device)");

  // Random ops draw from the core's own generator, as CUDA ops do.
  std::unique_lock<std::mutex> generator_lock;
  at::CPUGeneratorImpl* neuron_gen = nullptr;
  if (generator_pos) {
    if (!state.neuron_generator.defined() && state.device) {
      state.neuron_generator = default_generator(*state.device);
    }
    if (state.neuron_generator.defined()) {
      neuron_gen = state.neuron_generator.get<at::CPUGeneratorImpl>();
      generator_lock = std::unique_lock<std::mutex>(state.neuron_generator.mutex());
      copy_generator_state(*neuron_gen, *scratch_generator().get<at::CPUGeneratorImpl>());
      (*stack)[*generator_pos] = c10::IValue(scratch_generator());
    }
  }

  std::optional<BorrowedDefaultGenerator> borrowed_default;
  if (!generator_pos && state.device && op.hasTag(at::Tag::nondeterministic_seeded)) {
    state.neuron_generator = default_generator(*state.device);
    generator_lock = std::unique_lock<std::mutex>(state.neuron_generator.mutex());
    borrowed_default.emplace(state.neuron_generator.get<at::CPUGeneratorImpl>());
  }

  if (accounting_enabled()) {
    account_kernel(op, *stack);
  }

  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);

  borrowed_default.reset();
  if (neuron_gen != nullptr) {
    copy_generator_state(*scratch_generator().get<at::CPUGeneratorImpl>(), *neuron_gen);
  }
  sync_written_args(state);

  const size_t num_returns = schema.returns().size();
  const size_t rbegin = stack->size() - num_returns;
  AdoptedList adopted;
  for (size_t i = rbegin; i < stack->size(); ++i) {
    auto& value = (*stack)[i];
    if (value.isTensor()) {
      value = to_neuron_result(value.toTensor(), state, adopted);
    } else if (value.isTensorList()) {
      auto list = value.toTensorList();
      for (size_t j = 0; j < list.size(); ++j) {
        list.set(j, to_neuron_result(list.get(j), state, adopted));
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
