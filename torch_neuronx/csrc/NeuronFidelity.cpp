// Fidelity hooks on the eager hot path: per-signature kernel accounting
// (what Trainium would compile) and 64-bit value narrowing.
//
// On Trainium each distinct (op, shapes, dtypes, non-tensor args, compiler
// flags) is compiled once into a NEFF and cached. Here every kernel the
// fallback runs is hashed into such a signature; the first time a signature
// is seen in this process, a Python callback consults the persistent cache
// (fidelity/neff_cache.py). Repeats only bump a counter.
//
// Also here: the device's memory-format rule (contiguous layouts only) on the
// ops through which users request a layout.
#include "NeuronRuntime.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/_to_copy_native.h>
#include <ATen/ops/clone_native.h>
#include <ATen/ops/empty_like_native.h>
#include <pybind11/pybind11.h>
#include <torch/library.h>
#include <torch/csrc/utils/pybind.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <sstream>
#include <iomanip>
#include <unordered_map>
#include <unordered_set>

namespace py = pybind11;

namespace torch_neuronx {
namespace {

struct OpCounts {
  std::string name;
  uint64_t name_hash = 0; // stable across processes, unlike the schema address
  uint64_t calls = 0;
  uint64_t signatures = 0;
};

std::atomic<bool> g_enabled{false};
std::atomic<int> g_narrowing{0};
std::atomic<uint64_t> g_salt{0};
std::mutex g_mutex;
std::unordered_set<uint64_t> g_seen;
std::unordered_map<const void*, OpCounts> g_ops;
uint64_t g_calls = 0;
uint64_t g_repeats = 0;
py::object* g_callback = nullptr; // leaked on purpose: outlives interpreter teardown

inline void mix(uint64_t& h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
}

void mix_tensor(uint64_t& h, const at::Tensor& t) {
  if (!t.defined()) {
    mix(h, 0xdead);
    return;
  }
  mix(h, static_cast<uint64_t>(t.scalar_type()));
  mix(h, static_cast<uint64_t>(t.dim()));
  for (auto s : t.sizes()) {
    mix(h, static_cast<uint64_t>(s));
  }
  mix(h, t.is_contiguous() ? 1 : 2);
}

void mix_value(uint64_t& h, const c10::IValue& v) {
  if (v.isTensor()) {
    mix_tensor(h, v.toTensor());
  } else if (v.isTensorList()) {
    for (const auto& t : v.toTensorList()) {
      mix_tensor(h, t);
    }
  } else if (v.isList()) {
    for (const auto& e : v.toListRef()) {
      mix_value(h, e);
    }
  } else if (v.isInt()) {
    mix(h, static_cast<uint64_t>(v.toInt()));
  } else if (v.isDouble()) {
    double d = v.toDouble();
    uint64_t bits;
    std::memcpy(&bits, &d, sizeof bits);
    mix(h, bits);
  } else if (v.isBool()) {
    mix(h, v.toBool() ? 3 : 5);
  } else if (v.isString()) {
    mix(h, std::hash<std::string>{}(v.toStringRef()));
  } else if (v.isNone()) {
    mix(h, 7);
  } else if (v.isIntList()) {
    for (auto i : v.toIntVector()) {
      mix(h, static_cast<uint64_t>(i));
    }
  } else if (v.isDoubleList()) {
    for (auto d : v.toDoubleVector()) {
      uint64_t bits;
      std::memcpy(&bits, &d, sizeof bits);
      mix(h, bits);
    }
  } else if (v.isBoolList()) {
    for (bool b : v.toBoolList()) {
      mix(h, b ? 3 : 5);
    }
  }
  // Devices and generators do not change the compiled kernel.
}

void describe_value(std::ostream& os, const c10::IValue& v) {
  if (v.isTensor()) {
    const auto& t = v.toTensor();
    if (!t.defined()) {
      os << "None";
      return;
    }
    os << c10::toString(t.scalar_type()) << t.sizes();
  } else if (v.isTensorList() || v.isList()) {
    os << "[";
    bool first = true;
    for (const auto& e : v.toListRef()) {
      os << (first ? "" : ", ");
      describe_value(os, e);
      first = false;
    }
    os << "]";
  } else if (v.isDevice() || v.isGenerator()) {
    os << "_";
  } else {
    os << v;
  }
}

std::string describe(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  const size_t n = op.schema().arguments().size();
  std::ostringstream os;
  os << op.schema().operator_name() << "(";
  for (size_t i = stack.size() - n; i < stack.size(); ++i) {
    os << (i + n == stack.size() ? "" : ", ");
    describe_value(os, stack[i]);
  }
  os << ")";
  return os.str();
}

} // namespace

bool accounting_enabled() {
  return g_enabled.load(std::memory_order_relaxed);
}

void account_kernel(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  const auto& schema = op.schema();
  const size_t n = schema.arguments().size();
  // Arguments are hashed outside the lock; the op's own hash is cached per
  // schema so the hot path never formats a string.
  uint64_t args = 0x51ed270b;
  for (size_t i = stack.size() - n; i < stack.size(); ++i) {
    mix_value(args, stack[i]);
  }
  uint64_t h = g_salt.load(std::memory_order_relaxed);
  std::string name;
  py::object* callback = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    ++g_calls;
    auto [it, inserted] = g_ops.try_emplace(&schema);
    auto& counts = it->second;
    if (inserted) {
      std::ostringstream os;
      os << schema.operator_name();
      counts.name = os.str();
      counts.name_hash = std::hash<std::string>{}(counts.name);
    }
    ++counts.calls;
    mix(h, counts.name_hash);
    mix(h, args);
    if (!g_seen.insert(h).second) {
      ++g_repeats;
      return;
    }
    ++counts.signatures;
    if (g_callback == nullptr) {
      return;
    }
    callback = g_callback;
    name = counts.name;
  }
  const std::string text = describe(op, stack);
  std::ostringstream key;
  key << std::hex << std::setw(16) << std::setfill('0') << h;
  py::gil_scoped_acquire gil;
  try {
    (*callback)(name, key.str(), text);
  } catch (py::error_already_set& e) {
    // Accounting must never break the computation it observes.
    e.discard_as_unraisable(__func__);
  }
}

int narrowing_mode() {
  return g_narrowing.load(std::memory_order_relaxed);
}

void narrow_64bit_inplace(const at::Tensor& t) {
  const auto dtype = t.scalar_type();
  if ((dtype != at::kLong && dtype != at::kDouble) || t.numel() == 0) {
    return;
  }
  at::Tensor narrowed;
  bool changed;
  if (dtype == at::kLong) {
    auto [lo, hi] = at::aminmax(t);
    changed = lo.item<int64_t>() < std::numeric_limits<int32_t>::min() ||
        hi.item<int64_t>() > std::numeric_limits<int32_t>::max();
    if (changed) {
      narrowed = t.to(at::kInt); // wraps modulo 2**32, as int32 storage does
    }
  } else {
    narrowed = t.to(at::kFloat);
    changed = !narrowed.to(at::kDouble).equal(t);
  }
  if (!changed) {
    return;
  }
  TORCH_CHECK(
      narrowing_mode() != 2,
      "neuron: a ", c10::toString(dtype), " value does not fit in ",
      dtype == at::kLong ? "int32" : "float32",
      ", which is how Trainium stores it (TORCHNEURON_64BIT=strict). Keep "
      "values in range, or cast explicitly before moving to the device.");
  TORCH_WARN_ONCE(
      "neuron: Trainium has no 64-bit device dtypes; int64 values are kept as "
      "int32 (wrapping) and float64 as float32, and at least one value changed. "
      "Set TORCHNEURON_64BIT=strict to raise, or =off to keep 64-bit values.");
  t.copy_(narrowed);
}

namespace {

// The real device supports only contiguous_format and preserve_format. The
// check sits on the user-facing ops (.contiguous(memory_format=),
// .to(memory_format=), empty_like) rather than in `empty`, which PyTorch's
// own kernels call with whatever layout they suggest for their outputs.
void check_memory_format(std::optional<c10::MemoryFormat> format) {
  const auto f = format.value_or(c10::MemoryFormat::Preserve);
  TORCH_CHECK(
      f == c10::MemoryFormat::Contiguous || f == c10::MemoryFormat::Preserve,
      "neuron tensors support only torch.contiguous_format (and "
      "torch.preserve_format); got memory format ", f,
      ". Trainium kernels are compiled for contiguous layouts: keep the "
      "default layout instead of requesting ", f, ".");
}

at::Tensor clone(const at::Tensor& self, std::optional<c10::MemoryFormat> format) {
  check_memory_format(format);
  return at::native::clone(self, format);
}

at::Tensor to_copy(
    const at::Tensor& self,
    std::optional<c10::ScalarType> dtype,
    std::optional<c10::Layout> layout,
    std::optional<c10::Device> device,
    std::optional<bool> pin_memory,
    bool non_blocking,
    std::optional<c10::MemoryFormat> format) {
  check_memory_format(format);
  return at::native::_to_copy(self, dtype, layout, device, pin_memory, non_blocking, format);
}

at::Tensor empty_like(
    const at::Tensor& self,
    std::optional<c10::ScalarType> dtype,
    std::optional<c10::Layout> layout,
    std::optional<c10::Device> device,
    std::optional<bool> pin_memory,
    std::optional<c10::MemoryFormat> format) {
  check_memory_format(format);
  return at::native::empty_like(self, dtype, layout, device, pin_memory, format);
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("clone", clone);
  m.impl("_to_copy", to_copy);
  m.impl("empty_like", empty_like);
}

void register_fidelity_bindings(py::module& m) {
  m.def("_set_accounting", [](bool enabled, uint64_t salt) {
    g_salt = salt;
    g_enabled = enabled;
  });
  m.def("_set_signature_callback", [](py::object fn) {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (fn.is_none()) {
      g_callback = nullptr; // the previous object is leaked, see above
      return;
    }
    if (g_callback == nullptr) {
      g_callback = new py::object();
    }
    *g_callback = std::move(fn);
  });
  m.def("_accounting_stats", []() {
    std::lock_guard<std::mutex> lock(g_mutex);
    py::dict ops;
    for (const auto& [key, counts] : g_ops) {
      ops[py::str(counts.name)] = py::make_tuple(counts.calls, counts.signatures);
    }
    py::dict out;
    out["calls"] = g_calls;
    out["repeats"] = g_repeats;
    out["signatures"] = g_seen.size();
    out["ops"] = ops;
    return out;
  });
  m.def("_reset_accounting", []() {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_seen.clear();
    g_ops.clear();
    g_calls = 0;
    g_repeats = 0;
  });
  // Forget which signatures were seen (counters stay): each one reaches the
  // callback again, which is how op tracking is re-armed after a clear.
  m.def("_forget_signatures", []() {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_seen.clear();
  });
  m.def("_set_narrowing_mode", [](int mode) {
    TORCH_CHECK(mode >= 0 && mode <= 2, "narrowing mode must be 0, 1 or 2");
    g_narrowing = mode;
  });
  m.def("_narrowing_mode", []() { return narrowing_mode(); });
}

} // namespace torch_neuronx
