// Python bindings of the C++ core: `torch_neuronx._C`. Every binding lives
// here; the components are in runtime/, aten/ and fidelity/ (README.md).
#include "aten/Routes.h"
#include "aten/native/Native.h"
#include "fidelity/Accounting.h"
#include "fidelity/Narrowing.h"
#include "runtime/Alias.h"
#include "runtime/Allocator.h"
#include "runtime/Device.h"
#include "runtime/Generators.h"
#include "runtime/HostPool.h"

#include <torch/csrc/Generator.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/extension.h>

namespace torch_neuronx {
namespace {

void bind_runtime(py::module& m) {
  m.def("_configure_devices", &configure_devices,
        "Set the number of logical cores and the HBM bytes of each");
  m.def("_set_default_device", [](int index) { set_default_device(index); });
  m.def("_device_count", []() { return static_cast<int>(device_count()); });
  m.def("_current_device", []() { return static_cast<int>(current_device()); });
  m.def("_set_device", [](int index) { set_current_device(index); });
  m.def("_is_initialized", &runtime_initialized);
  m.def("_init", &mark_runtime_initialized);
  m.def("_initialize_runtime", &initialize_runtime,
        "torch.neuron.init(): the real product's _lazy_init, refused in a bad fork (runtime/Fork.cpp)");
  m.def("_in_bad_fork", &in_bad_fork,
        "Forked after the runtime was initialised from Python (runtime/Fork.cpp)");
  m.def("_set_init_error", &set_init_error);
  m.def("_device_capacity", [](int index) { return device_capacity(index); });
  m.def("_cpu_alias", &cpu_alias, "Zero-copy CPU view of a neuron tensor");
  m.def("_adopt_cpu_tensor",
        [](const at::Tensor& t, int index) { return adopt_cpu_tensor(t, index); },
        "Take ownership of a CPU tensor's memory as neuron memory (zero-copy)");
  m.def("_default_generator", [](int index) {
    return py::reinterpret_steal<py::object>(
        THPGenerator_initDefaultGenerator(default_generator(index)));
  });
  m.def("_install_host_pool", &install_host_pool,
        "Pool the host memory of large neuron tensors (see runtime/HostPool.cpp)");
  m.def("_host_pool_stats", []() {
    const auto s = host_pool_stats();
    return py::dict(py::arg("hits") = s[0], py::arg("misses") = s[1],
                    py::arg("cached_bytes") = s[2], py::arg("limit_bytes") = s[3]);
  });
}

void bind_routes(py::module& m) {
  m.def("_fast_path_ops", &fast_path_ops,
        "Ops that run through the unboxed fast path (see aten/FastPath.cpp)");
  m.def("_bit_exact_ops", &bit_exact_ops,
        "Ops sent to the CPU kernel instead of a decomposition (see aten/Fallback.cpp)");
  m.def("_ops_routed_to_fallback", &route_ops_to_fallback,
        "How many structured and foreach ops were routed to the fallback at module init (aten/Fallback.cpp)");
  m.def("_set_fused_attention", &native::set_fused_attention,
        "TORCH_NEURONX_ENABLE_NKI_SDPA: fused flash attention when possible (see aten/Attention.cpp)");
}

void bind_fidelity(py::module& m) {
  m.def("_set_accounting", &set_accounting);
  m.def("_set_signature_callback", &set_signature_callback);
  m.def("_accounting_stats", []() {
    const auto stats = accounting_stats();
    py::dict ops;
    for (const auto& op : stats.ops) {
      ops[py::str(op.name)] = py::make_tuple(op.calls, op.signatures);
    }
    py::dict out;
    out["calls"] = stats.calls;
    out["repeats"] = stats.repeats;
    out["signatures"] = stats.signatures;
    out["ops"] = ops;
    return out;
  });
  m.def("_signature_calls", []() {
    py::dict out;
    for (const auto& [key, calls] : signature_calls()) {
      out[py::str(key)] = calls;
    }
    return out;
  }, "Calls per signature key since the last reset");
  m.def("_set_static_arguments", &set_static_arguments,
        "Rows (op pattern, argument name) whose values are part of the kernel key");
  m.def("_kernel_key", [](const std::string& op, py::args args, py::kwargs kwargs) {
    const auto dot = op.find('.');
    const auto handle = c10::Dispatcher::singleton().findSchemaOrThrow(
        op.substr(0, dot).c_str(), dot == std::string::npos ? "" : op.substr(dot + 1).c_str());
    const auto stack = torch::jit::createStackForSchema(handle.schema(), args, kwargs, std::nullopt);
    return signature_key(handle, stack);
  }, "The key the boxed fallback gives a call of `op` (e.g. 'aten::add.Tensor')");
  m.def("_reset_accounting", &reset_accounting);
  m.def("_forget_signatures", &forget_signatures);
  m.def("_set_narrowing_mode", &set_narrowing_mode);
  m.def("_narrowing_mode", &configured_narrowing_mode);
  m.def("_suspend_narrowing", &suspend_narrowing);
}

} // namespace
} // namespace torch_neuronx

PYBIND11_MODULE(_C, m) {
  using namespace torch_neuronx;
  m.doc() = "C++ core of the emulated neuron device";
  // Every static registration of this library has run by now (see
  // aten/Fallback.cpp): route the ops that still lack a kernel.
  route_ops_to_fallback();
  bind_runtime(m);
  bind_routes(m);
  bind_fidelity(m);
}
