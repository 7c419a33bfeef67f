// Python bindings of the C++ core: `torch_neuronx._C`.
#include "NeuronRuntime.h"

#include <torch/csrc/Generator.h>
#include <torch/extension.h>

namespace torch_neuronx {
void register_fidelity_bindings(pybind11::module& m);
}

PYBIND11_MODULE(_C, m) {
  using namespace torch_neuronx;
  m.doc() = "C++ core of the emulated neuron device";
  m.def("_configure_devices", &configure_devices,
        "Set the number of logical cores and the HBM bytes of each");
  m.def("_set_default_device", [](int index) { set_default_device(index); });
  m.def("_device_count", []() { return static_cast<int>(device_count()); });
  m.def("_current_device", []() { return static_cast<int>(current_device()); });
  m.def("_set_device", [](int index) { set_current_device(index); });
  m.def("_is_initialized", &runtime_initialized);
  m.def("_init", &mark_runtime_initialized);
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
  m.def("_route_structured_ops_to_fallback", &route_structured_ops_to_fallback,
        "Run CPU's functional kernels of structured ops directly (see NeuronFallback.cpp)");
  m.def("_install_host_pool", &install_host_pool,
        "Pool the host memory of large neuron tensors (see NeuronHostPool.cpp)");
  m.def("_host_pool_stats", []() {
    const auto s = host_pool_stats();
    return py::dict(py::arg("hits") = s[0], py::arg("misses") = s[1],
                    py::arg("cached_bytes") = s[2], py::arg("limit_bytes") = s[3]);
  });
  m.def("_fast_path_ops", &fast_path_ops,
        "Ops that run through the unboxed fast path (see NeuronFastPath.cpp)");
  m.def("_set_fused_attention", &set_fused_attention,
        "TORCH_NEURONX_ENABLE_NKI_SDPA: fused flash attention when possible (see NeuronAttention.cpp)");
  register_fidelity_bindings(m);
}
