// Python bindings of the C++ core: `torch_neuronx._C`. Every binding lives
// here; the components are in runtime/, aten/, accounting/ and numerics/ (README.md).
#include "aten/Routes.h"
#include "aten/native/Native.h"
#include "accounting/Accounting.h"
#include "numerics/Narrowing.h"
#include "numerics/Precision.h"
#include "profiler/DeviceTrace.h"
#include "runtime/Alias.h"
#include "runtime/Allocator.h"
#include "runtime/AllocatorPools.h"
#include "runtime/AllocatorSizes.h"
#include "runtime/AllocatorSnapshot.h"
#include "runtime/AutogradWorkers.h"
#include "runtime/Device.h"
#include "runtime/Generators.h"
#include "runtime/GraphInputs.h"
#include "runtime/HostPool.h"

#include <torch/csrc/Device.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/pybind.h>

namespace torch_neuronx {

// Defined in accounting/Accounting.cpp, declared here (the one caller) so that
// pybind11 stays out of Accounting.h. A Python callable run for each signature
// new to this process (None: none), as fn(op overload name, key hex, readable
// signature, arguments) where the arguments are a tuple with every tensor
// replaced by a meta tensor.
void set_signature_callback(py::object fn);
// Defined in profiler/DeviceTrace.cpp, for the same reason: registers the
// device's Kineto activity profiler, whose sessions call on_start(custom
// config) when a profile starts and build(notes, start ns, end ns) when it
// stops (torch_neuronx/profiling/session.py says what they take and return).
void install_device_trace(py::object on_start, py::object build);

namespace {

py::object wrap(at::Tensor t) {
  PyObject* obj = THPVariable_Wrap(std::move(t));
  if (obj == nullptr) {
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::object>(obj);
}

// Compiled graphs (compile/aliased_execution.py): one GraphInputs per graph,
// one GraphCall per run; lists are converted here in one pass.
void bind_graph_inputs(py::module& m) {
  py::class_<GraphCall, std::shared_ptr<GraphCall>>(m, "_GraphCall")
      .def("results", [](GraphCall& call, const py::sequence& outs) {
        const size_t n = std::min(static_cast<size_t>(py::len(outs)), call.outputs());
        py::list results(n);
        for (size_t i = 0; i < n; ++i) {
          py::object out = outs[i];
          results[i] = THPVariable_Check(out.ptr())
              ? wrap(call.result(i, THPVariable_Unpack(out.ptr())))
              : out;
        }
        return results;
      }, "The graph's outputs on the devices it promised (GraphInputs.h)");
  py::class_<GraphInputs, std::shared_ptr<GraphInputs>>(m, "_GraphInputs")
      .def(py::init([](const py::sequence& devices) {
        std::vector<std::optional<c10::Device>> parsed;
        for (const auto& d : devices) {
          if (d.is_none()) {
            parsed.emplace_back(std::nullopt);
          } else {
            TORCH_CHECK(THPDevice_Check(d.ptr()), "_GraphInputs: devices must be torch.device or None");
            parsed.emplace_back(reinterpret_cast<THPDevice*>(d.ptr())->device);
          }
        }
        return std::make_shared<GraphInputs>(std::move(parsed));
      }), "Per compiled graph: `devices` of its outputs (None for non-tensors)")
      .def("alias", [](GraphInputs& self, const py::list& args) {
        const size_t n = args.size();
        std::vector<at::Tensor> tensors(n);
        for (size_t i = 0; i < n; ++i) {
          if (THPVariable_Check(args[i].ptr())) {
            tensors[i] = THPVariable_Unpack(args[i].ptr());
          }
        }
        auto call = self.new_call();
        const auto aliases = self.alias(tensors, *call);
        py::list cpu_args(n);
        for (size_t i = 0; i < n; ++i) {
          cpu_args[i] = tensors[i].defined() ? wrap(aliases[i]) : py::object(args[i]);
        }
        return py::make_tuple(std::move(cpu_args), std::move(call));
      }, "(CPU arguments, the call holding the neuron ones) for one run");
  m.def("_graph_input_aliases", [](bool reset) {
    const auto [built, reused] = graph_input_alias_counts(reset);
    return py::dict(py::arg("built") = built, py::arg("reused") = reused);
  }, py::arg("reset") = false, "Input aliases compiled graphs built and reused (then reset if asked)");
}

// The caching allocator's sizes and history (runtime/AllocatorSizes.h, AllocatorSnapshot.h).
void bind_memory_history(py::module& m) {
  m.def("_allocator_block_bytes", [](size_t bytes) { return block_bytes(bytes); },
        "Bytes of the block a request of `bytes` (> 0) gets");
  m.def("_allocator_segment_bytes", [](size_t bytes) { return segment_bytes(bytes); },
        "Bytes of the segment such a request opens when no cached block holds it");
  m.def("_allocator_layout_bytes", &layout_bytes,
        "(allocated, reserved) bytes of a fresh core after these requests, none freed");
  m.def("_record_memory_history", &record_memory_history,
        "(trace, context 0-3, cpp frames, max entries, clear): torch.neuron.memory._record_memory_history");
  m.def("_memory_snapshot", &memory_snapshot, "PyTorch's memory snapshot dictionary of every core");
}

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
  m.def("_settle_autograd_workers", &settle_autograd_workers, py::call_guard<py::gil_scoped_release>(),
        "Wait until these devices' autograd workers dropped every earlier graph task (runtime/AutogradWorkers.cpp)");
  m.def("_cpu_alias", &cpu_alias, "Zero-copy CPU view of a neuron tensor");
  m.def("_adopt_cpu_tensor",
        [](const at::Tensor& t, int index) { return adopt_cpu_tensor(t, index); },
        "Take ownership of a CPU tensor's memory as neuron memory (zero-copy)");
  bind_graph_inputs(m);
  m.def("_default_generator", [](int index) {
    return py::reinterpret_steal<py::object>(
        THPGenerator_initDefaultGenerator(default_generator(index)));
  });
  m.def("_set_shard_index", [](at::Generator gen, std::optional<at::Tensor> index) {
    TORCH_CHECK(gen.device().type() == kNeuron, "_set_shard_index takes a neuron generator");
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.get<NeuronGenerator>()->set_shard_index(index.value_or(at::Tensor()));
  }, "Each element's index in the whole DTensor, for the generator's next draw (runtime/Generators.h)");
  m.def("_set_counter_draws", &set_counter_draws,
        "Random ops without a neuron generator draw from the core's counter-based generator (true) "
        "or from the CPU default generator (false, as the real product does)");
  m.def("_counter_draws", &counter_draws);
  m.def("_install_host_pool", &install_host_pool,
        "Pool the host memory of large neuron tensors (see runtime/HostPool.cpp)");
  m.def("_host_pool_stats", []() {
    const auto s = host_pool_stats();
    return py::dict(py::arg("hits") = s[0], py::arg("misses") = s[1],
                    py::arg("cached_bytes") = s[2], py::arg("limit_bytes") = s[3]);
  });
  bind_memory_history(m);
}

void bind_routes(py::module& m) {
  m.def("_fast_path_ops", &fast_path_ops,
        "Ops that run through the unboxed fast path (see aten/FastPathRoutes.cpp)");
  m.def("_bit_exact_ops", &bit_exact_ops,
        "Ops sent to the CPU kernel instead of a decomposition (see aten/CpuFallbackRoutes.cpp)");
  m.def("_ops_routed_to_fallback", &route_ops_to_fallback,
        "The structured and foreach ops routed to the fallback at module init (aten/CpuFallbackRoutes.cpp)");
  m.def("_ops_accounted_as_composite", &ops_accounted_as_composite,
        "Native kernels that account the kernels of the composite they replace (aten/NativeRoutes.cpp)");
  m.def("_accounted_native_ops", &accounted_native_ops,
        "Native kernels accounted as one kernel of their own (aten/ScaledMatmulRoutes.cpp)");
  m.def("_set_fused_attention", &native::set_fused_attention,
        "TORCH_NEURONX_ENABLE_NKI_SDPA: fused flash attention when possible (see aten/AttentionRoutes.cpp)");
}

// The operator named like 'aten::add.Tensor' (no overload: the default one).
c10::OperatorHandle op_handle(const std::string& op) {
  const auto dot = op.find('.');
  return c10::Dispatcher::singleton().findSchemaOrThrow(
      op.substr(0, dot).c_str(), dot == std::string::npos ? "" : op.substr(dot + 1).c_str());
}

void bind_accounting(py::module& m) {
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
    const auto handle = op_handle(op);
    const auto stack = torch::jit::createStackForSchema(handle.schema(), args, kwargs, std::nullopt);
    return signature_key(handle, stack);
  }, "The key the boxed fallback gives a call of `op` (e.g. 'aten::add.Tensor')");
  m.def("_argument_masks", [](const std::string& op) {
    const auto handle = op_handle(op);
    const auto masks = argument_masks(handle.schema());
    return py::make_tuple(masks.is_static, masks.is_out);
  }, "(static, out=) argument bit masks the key of `op` uses, from this thread's cache");
  m.def("_argument_mask_computations", &argument_mask_computations,
        "Masks computed so far (this thread's cache missed), all threads");
  m.def("_reset_accounting", &reset_accounting);
  m.def("_forget_signatures", &forget_signatures);
}

at::ScalarType scalar_type_of(const py::handle& dtype) {
  TORCH_CHECK(THPDtype_Check(dtype.ptr()), "expected a torch.dtype");
  return reinterpret_cast<THPDtype*>(dtype.ptr())->scalar_type;
}

void bind_device_trace(py::module& m) {
  m.def("_install_device_trace", &install_device_trace);
  m.def("_device_trace_note", [](int kind, uint64_t payload, int64_t issue_ns) {
    TORCH_CHECK(kind == 1 || kind == 2, "_device_trace_note: kind is 1 (graph) or 2 (collective), not ", kind);
    note_device_work(static_cast<DeviceWork>(kind), payload, issue_ns);
  }, "Note a compiled graph (1) or collective (2) issued at issue_ns (Unix ns) while a profile records");
  m.def("_device_trace_recording", &device_trace_recording);
}

void bind_numerics(py::module& m) {
  m.def("_set_narrowing_mode", &set_narrowing_mode);
  m.def("_narrowing_mode", &configured_narrowing_mode);
  m.def("_suspend_narrowing", &suspend_narrowing);
  m.def("_set_stochastic_rounding", &configure_stochastic_rounding,
        "Stochastic rounding on/off, the generator restarted from the seed");
  m.def("_stochastic_rounding", []() {
    return py::make_tuple(stochastic_rounding_enabled(), stochastic_rounding_seed());
  });
  m.def("_set_auto_cast", [](int mode, int type) {
    set_auto_cast(static_cast<AutoCast>(mode), static_cast<CastType>(type));
  }, "neuronx-cc --auto-cast (0 none, 1 matmult, 2 all) and --auto-cast-type (0 bf16, 1 fp16, 2 tf32, 3 fp8_e4m3)");
  m.def("_set_tensor_engine_ops", &set_tensor_engine_ops);
  m.def("_unrounded_ops", &unrounded_ops);
  m.def("_set_refused_dtypes", [](const py::list& refused) {
    std::vector<std::pair<at::ScalarType, std::string>> parsed;
    for (const auto& item : refused) {
      auto pair = item.cast<py::tuple>();
      parsed.emplace_back(scalar_type_of(pair[0]), pair[1].cast<std::string>());
    }
    set_refused_dtypes(parsed);
  }, "[(dtype, message)]: FP8 formats the instance refuses");
  m.def("_set_mx_support", &set_mx_support);
  m.def("_round_stochastically", [](const at::Tensor& t, const py::handle& dtype) {
    return wrap(round_stochastically(t, scalar_type_of(dtype)));
  }, "A CPU floating tensor rounded stochastically to a narrow float dtype");
  m.def("_round_in_float", [](const at::Tensor& t, int type, bool stochastic) {
    return wrap(round_in_float(t, static_cast<CastType>(type), stochastic));
  }, "A CPU floating tensor rounded to an auto-cast type's precision, in float32");
}

} // namespace
} // namespace torch_neuronx

PYBIND11_MODULE(_C, m) {
  using namespace torch_neuronx;
  m.doc() = "C++ core of the emulated neuron device";
  // Every static registration of this library has run by now (see
  // aten/CpuFallbackRoutes.cpp): route the ops that still lack a kernel.
  route_ops_to_fallback();
  bind_runtime(m);
  bind_routes(m);
  bind_accounting(m);
  bind_numerics(m);
  bind_device_trace(m);
}
