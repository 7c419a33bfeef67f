// Per-signature kernel accounting: what Trainium would compile.
//
// On Trainium each distinct (op, shapes, dtypes, non-tensor args, compiler
// flags) is compiled once into a NEFF and cached. Here every kernel the
// fallback runs is hashed into such a signature; the first time a signature
// is seen in this process, a Python callback consults the persistent cache
// (fidelity/neff_cache.py). Repeats only bump a counter.
#include "fidelity/Accounting.h"

#include <torch/csrc/utils/pybind.h>

#include <array>
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

// Entries are never erased (a reset zeroes them): threads keep pointers to
// them in their repeat caches.
struct OpCounts {
  std::string name;
  uint64_t name_hash = 0; // stable across processes, unlike the schema address
  std::atomic<uint64_t> calls{0};
  uint64_t signatures = 0; // under g_mutex
};

std::atomic<bool> g_enabled{false};
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

void set_accounting(bool enabled, uint64_t salt) {
  g_salt = salt;
  g_generation.fetch_add(1);
  g_enabled = enabled;
}

void set_signature_callback(py::object fn) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (fn.is_none()) {
    g_callback = nullptr; // the previous object is leaked, see above
    return;
  }
  if (g_callback == nullptr) {
    g_callback = new py::object();
  }
  *g_callback = std::move(fn);
}

AccountingStats accounting_stats() {
  std::lock_guard<std::mutex> lock(g_mutex);
  AccountingStats stats{g_calls.load(), g_repeats.load(), g_seen.size(), {}};
  for (const auto& [key, counts] : g_ops) {
    const uint64_t calls = counts.calls.load(std::memory_order_relaxed);
    if (calls > 0) {
      stats.ops.push_back({counts.name, calls, counts.signatures});
    }
  }
  return stats;
}

void reset_accounting() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_seen.clear();
  for (auto& [key, counts] : g_ops) {
    counts.calls = 0;
    counts.signatures = 0;
  }
  g_calls = 0;
  g_repeats = 0;
  g_generation.fetch_add(1);
}

void forget_signatures() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_seen.clear();
  g_generation.fetch_add(1);
}

} // namespace torch_neuronx
