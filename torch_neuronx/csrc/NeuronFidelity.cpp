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

#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <mutex>
#include <sstream>
#include <iomanip>
#include <unordered_map>
#include <unordered_set>

namespace py = pybind11;

namespace torch_neuronx {
namespace {

// Entries are never erased (a reset zeroes them): threads keep pointers to
// them in their repeat caches.
struct OpCounts {
  std::string name;
  uint64_t name_hash = 0; // stable across processes, unlike the schema address
  std::atomic<uint64_t> calls{0};
  uint64_t signatures = 0; // under g_mutex
};

std::atomic<bool> g_enabled{false};
std::atomic<int> g_narrowing{0};
std::atomic<uint64_t> g_salt{0};
std::mutex g_mutex;
std::unordered_set<uint64_t> g_seen;
std::unordered_map<const void*, OpCounts> g_ops;
std::atomic<uint64_t> g_calls{0};
std::atomic<uint64_t> g_repeats{0};
// Bumped whenever seen signatures are forgotten or the salt changes: it
// invalidates every thread's repeat cache.
std::atomic<uint64_t> g_generation{1};

// Repeats are the hot path (the same kernel every step): each thread
// remembers signatures it has already seen counted, keyed by (op, arguments),
// so a repeat costs a table probe and three relaxed increments instead of the
// global lock and two hash-table lookups.
struct RepeatCache {
  static constexpr size_t kSlots = 1024;
  uint64_t generation = 0;
  std::array<std::pair<uint64_t, OpCounts*>, kSlots> slots{};

  std::pair<uint64_t, OpCounts*>& slot(uint64_t key) {
    const uint64_t current = g_generation.load(std::memory_order_acquire);
    if (generation != current) {
      slots.fill({0, nullptr});
      generation = current;
    }
    return slots[key % kSlots];
  }
};
thread_local RepeatCache t_repeats;
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

} // namespace

std::string describe_signature(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args) {
  std::ostringstream os;
  os << op.schema().operator_name() << "(";
  for (size_t i = 0; i < args.size(); ++i) {
    os << (i == 0 ? "" : ", ");
    describe_value(os, args[i]);
  }
  os << ")";
  return os.str();
}

bool accounting_enabled() {
  return g_enabled.load(std::memory_order_relaxed);
}

void mix_signature_int(uint64_t& h, int64_t v) {
  mix(h, static_cast<uint64_t>(v));
}

void mix_signature_tensor(uint64_t& h, const at::Tensor& t) {
  mix_tensor(h, t);
}

void mix_signature_value(uint64_t& h, const c10::IValue& v) {
  mix_value(h, v);
}

void account_signature(
    const c10::OperatorHandle& op,
    uint64_t args_hash,
    c10::function_ref<std::string()> describe_call) {
  const auto& schema = op.schema();
  uint64_t repeat_key = args_hash;
  mix(repeat_key, reinterpret_cast<uintptr_t>(&schema));
  repeat_key |= 1; // 0 marks an empty slot
  auto& cached = t_repeats.slot(repeat_key);
  if (cached.first == repeat_key) {
    g_calls.fetch_add(1, std::memory_order_relaxed);
    g_repeats.fetch_add(1, std::memory_order_relaxed);
    cached.second->calls.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  // The op's own hash is cached per schema so the hot path never formats a
  // string; the arguments were hashed by the caller, outside the lock.
  uint64_t h = g_salt.load(std::memory_order_relaxed);
  std::string name;
  py::object* callback = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_calls.fetch_add(1, std::memory_order_relaxed);
    auto [it, inserted] = g_ops.try_emplace(&schema);
    auto& counts = it->second;
    if (inserted) {
      std::ostringstream os;
      os << schema.operator_name();
      counts.name = os.str();
      counts.name_hash = std::hash<std::string>{}(counts.name);
    }
    counts.calls.fetch_add(1, std::memory_order_relaxed);
    mix(h, counts.name_hash);
    mix(h, args_hash);
    cached = {repeat_key, &counts};
    if (!g_seen.insert(h).second) {
      g_repeats.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    ++counts.signatures;
    if (g_callback == nullptr) {
      return;
    }
    callback = g_callback;
    name = counts.name;
  }
  const std::string text = describe_call();
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

void account_kernel(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  const size_t n = op.schema().arguments().size();
  const c10::ArrayRef<c10::IValue> args(stack.data() + stack.size() - n, n);
  uint64_t args_hash = kSignatureSeed;
  for (const auto& value : args) {
    mix_value(args_hash, value);
  }
  account_signature(op, args_hash, [&] { return describe_signature(op, args); });
}

// Formatting a tensor for print() computes float64 temporaries on the device;
// narrowing them would warn about values the user never had. Python suspends
// narrowing on the printing thread only (fidelity/value_semantics.py).
thread_local int t_narrowing_suspended = 0;

int narrowing_mode() {
  return t_narrowing_suspended > 0 ? 0 : g_narrowing.load(std::memory_order_relaxed);
}

namespace {

// Whether any value of a contiguous int64/float64 tensor changes when kept
// in 32 bits (NaN stays NaN, infinities stay infinite).
bool changes_in_32_bits(const at::Tensor& t) {
  const int64_t n = t.numel();
  if (t.scalar_type() == at::kLong) {
    const int64_t* values = t.const_data_ptr<int64_t>();
    for (int64_t i = 0; i < n; ++i) {
      if (values[i] != static_cast<int32_t>(values[i])) {
        return true;
      }
    }
    return false;
  }
  const double* values = t.const_data_ptr<double>();
  for (int64_t i = 0; i < n; ++i) {
    const double v = values[i];
    if (static_cast<double>(static_cast<float>(v)) != v && !std::isnan(v)) {
      return true;
    }
  }
  return false;
}

} // namespace

void narrow_64bit_inplace(const at::Tensor& t) {
  const auto dtype = t.scalar_type();
  if ((dtype != at::kLong && dtype != at::kDouble) || t.numel() == 0) {
    return;
  }
  // Scanned directly (a strided view is made dense first): reductions and
  // item() calls would cost more than most kernels whose results land here.
  if (!changes_in_32_bits(t.is_contiguous() ? t : t.contiguous())) {
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
  // int64 wraps modulo 2**32, as int32 storage does.
  t.copy_(t.to(dtype == at::kLong ? at::kInt : at::kFloat));
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
    g_generation.fetch_add(1);
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
      const uint64_t calls = counts.calls.load(std::memory_order_relaxed);
      if (calls > 0) {
        ops[py::str(counts.name)] = py::make_tuple(calls, counts.signatures);
      }
    }
    py::dict out;
    out["calls"] = g_calls.load();
    out["repeats"] = g_repeats.load();
    out["signatures"] = g_seen.size();
    out["ops"] = ops;
    return out;
  });
  m.def("_reset_accounting", []() {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_seen.clear();
    for (auto& [key, counts] : g_ops) {
      counts.calls = 0;
      counts.signatures = 0;
    }
    g_calls = 0;
    g_repeats = 0;
    g_generation.fetch_add(1);
  });
  // Forget which signatures were seen (counters stay): each one reaches the
  // callback again, which is how op tracking is re-armed after a clear.
  m.def("_forget_signatures", []() {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_seen.clear();
    g_generation.fetch_add(1);
  });
  m.def("_set_narrowing_mode", [](int mode) {
    TORCH_CHECK(mode >= 0 && mode <= 2, "narrowing mode must be 0, 1 or 2");
    g_narrowing = mode;
  });
  m.def("_narrowing_mode", []() { return g_narrowing.load(); });
  m.def("_suspend_narrowing", [](bool suspend) { t_narrowing_suspended += suspend ? 1 : -1; });
}

} // namespace torch_neuronx
