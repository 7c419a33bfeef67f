// Route table: ops that run the boxed fallback (native/CpuFallback.cpp).
//
//   * every op without a neuron kernel (the catch-all below);
//   * ops PyTorch would decompose, sent to the CPU kernel for bit-exact
//     results (kBitExactOps);
//   * the foreach ops the real product compiles as one kernel for the whole
//     list, and structured ops, routed past PyTorch's out= wrapper (both
//     registered once at module init by route_ops_to_fallback).
#include "aten/Routes.h"
#include "aten/native/CpuFallback.h"

#include <torch/library.h>

#include <array>

namespace torch_neuronx {

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&native::neuron_fallback>());
}

// These ops have a CPU kernel and also a device-generic decomposition
// (CompositeExplicitAutograd), which PyTorch would pick for neuron. Sending
// them to the fallback runs the CPU kernel instead, so results match CPU bit
// for bit (layer_norm/group_norm in bfloat16 differ noticeably otherwise).
const std::vector<std::string>& bit_exact_ops() {
  static const std::vector<std::string> names = {
      "native_layer_norm", "native_group_norm", "addr", "addr.out", "_stack",
      "_stack.out", "all.dims", "all.dims_out", "any.dims", "any.dims_out",
      "linalg__powsum"};
  return names;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const auto& name : bit_exact_ops()) {
    m.impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<&native::neuron_fallback>());
  }
}

// Structured ops (add, mul, ...) reach a device without its own kernel through
// PyTorch's CompositeExplicitAutogradNonFunctional wrapper: it allocates the
// result on the device, then runs the `out=` kernel, so the fallback pays for
// an extra allocation, an extra alias and an out= sync. Routing such ops
// straight to the fallback runs CPU's functional/in-place kernel instead, whose
// result is adopted. Ops that already have a neuron kernel keep it, so this
// must run after every static registration of this library: Module.cpp calls
// it when the extension module initialises (static initialisers of a shared
// library all run before that), never from Python.

namespace {

// The foreach ops the real product registers (TR torch_neuronx/python_ops/torch_mlir/ops/
// foreach_ops.py): _foreach_{add,sub,mul,div} in every overload and
// _foreach_norm.Scalar are one Neuron kernel over the whole list, except the
// in-place .ScalarList forms, which loop over the tensors (one kernel per
// shape, as here through PyTorch's per-tensor slow path). Without a neuron
// kernel PyTorch would run its per-tensor slow path on the device, counting
// one kernel per tensor; through the fallback the CPU runs the same slow
// path on aliases and the call counts as one kernel.
bool is_single_kernel_foreach(const c10::OperatorName& name) {
  static const std::array<const char*, 8> kOps = {
      "aten::_foreach_add", "aten::_foreach_add_", "aten::_foreach_sub", "aten::_foreach_sub_",
      "aten::_foreach_mul", "aten::_foreach_mul_", "aten::_foreach_div", "aten::_foreach_div_"};
  if (name.name == "aten::_foreach_norm") {
    return name.overload_name == "Scalar";
  }
  for (const char* op : kOps) {
    if (name.name == op) {
      const bool in_place = name.name.back() == '_';
      return !(in_place && name.overload_name == "ScalarList");
    }
  }
  return false;
}

bool is_structured_without_kernel(const c10::OperatorHandle& op) {
  return op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional) &&
      op.hasKernelForDispatchKey(c10::DispatchKey::CPU);
}

} // namespace

const std::vector<std::string>& route_ops_to_fallback() {
  static std::vector<std::string> routed;
  static bool done = false;
  if (done) {
    return routed;
  }
  done = true;
  static auto* library = new torch::Library(
      torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  auto& dispatcher = c10::Dispatcher::singleton();
  for (const auto& name : dispatcher.getAllOpNames()) {
    if (name.name.rfind("aten::", 0) != 0) {
      continue;
    }
    auto op = dispatcher.findOp(name);
    if (!op || op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1) ||
        !(is_structured_without_kernel(*op) || is_single_kernel_foreach(name))) {
      continue;
    }
    std::string qualified = name.overload_name.empty()
        ? name.name
        : name.name + "." + name.overload_name;
    library->impl(qualified.c_str(),
                  torch::CppFunction::makeFromBoxedFunction<&native::neuron_fallback>());
    routed.push_back(std::move(qualified));
  }
  return routed;
}

} // namespace torch_neuronx
