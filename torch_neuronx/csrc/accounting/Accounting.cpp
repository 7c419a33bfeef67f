// Per-signature kernel accounting: what Trainium would compile.
//
// On Trainium each distinct eager kernel key (KernelKey.h) plus compiler
// configuration is compiled once into a NEFF and cached. Here every kernel the
// fallback or the fast path runs is keyed; the first time a signature is seen
// in this process, a Python callback consults the persistent cache
// (accounting/neff_cache.py) and the signature listeners. Repeats only bump
// counters.
#include "accounting/Accounting.h"
#include "profiler/DeviceTrace.h"
#include "runtime/Fork.h"
#include "runtime/PerThread.h"

#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <iomanip>
#include <mutex>
#include <sstream>
#include <unordered_map>

namespace py = pybind11;

namespace torch_neuronx {
namespace {

// Entries are never erased (a reset zeroes them): threads keep pointers to
// them in their repeat caches. An op's calls are the sum of its signatures'
// calls, and a signature's calls the sum of its shared count and the counts
// threads keep for it (RepeatCache), all formed when read.
struct OpCounts {
  std::string name;
  uint64_t name_hash = 0; // stable across processes, unlike the schema address
  uint64_t signatures = 0; // under g_mutex
};
struct SignatureCounts {
  OpCounts* op = nullptr;
  uint64_t key = 0; // the signature's key, set once when it is first counted
  uint64_t calls = 0; // under g_mutex; repeats counted by threads are added when read
  bool seen = false; // under g_mutex; false again after a reset or forget
};

std::atomic<uint64_t> g_salt{0};
std::mutex g_mutex;
// Leaked, like the list of caches below: a thread ending during static
// destruction still moves its counts into them.
std::unordered_map<uint64_t, SignatureCounts>& g_signatures =
    *new std::unordered_map<uint64_t, SignatureCounts>();
uint64_t g_seen = 0; // signatures with `seen`, under g_mutex
std::unordered_map<const void*, OpCounts>& g_ops = *new std::unordered_map<const void*, OpCounts>();
// Calls that marked their signature seen, under g_mutex. Total calls are the
// sum of the per-signature counts and repeats the rest, both formed when
// read, so a repeat bumps one counter, not four.
uint64_t g_first_calls = 0;
// Bumped whenever seen signatures are forgotten, the salt changes or the
// counts are reset: it invalidates every thread's repeat cache.
std::atomic<uint64_t> g_generation{1};
// Bumped by each reset, under g_mutex: counts a thread kept under an earlier
// one are dropped, not added.
uint64_t g_reset_epoch = 0;

struct RepeatCache;
// Live threads' caches, under g_mutex.
std::vector<RepeatCache*>& g_caches = *new std::vector<RepeatCache*>();

// Repeats are the hot path (the same kernel every step): each thread
// remembers signatures it has already seen counted, keyed by (op, arguments),
// and counts their repeats itself, so a repeat costs a table probe and a
// plain increment of the thread's own counter: no lock, and no atomic
// read-modify-write (a locked instruction, ~20 cycles, on every op).
//
// The counts stay exact: a slot's count is written only by its thread and
// read, by readers, under g_mutex; whatever moves a count elsewhere (a slot
// taken by another signature, a thread ending, a changed generation) runs
// under g_mutex too, so a reader sees each call once, in the slot or in the
// shared count. A reset drops what threads counted before it (their epoch).
struct RepeatCache {
  static constexpr size_t kSlots = 1024;
  struct Slot {
    uint64_t key = 0; // 0: empty
    SignatureCounts* signature = nullptr;
    std::atomic<uint64_t> calls{0}; // repeats not yet in signature->calls

    void count_one() {
      calls.store(calls.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    }
  };
  uint64_t generation = 0; // the owning thread's
  uint64_t epoch = 0;      // under g_mutex
  std::array<Slot, kSlots> slots{};

  RepeatCache() {
    std::lock_guard<std::mutex> lock(g_mutex);
    epoch = g_reset_epoch;
    g_caches.push_back(this);
  }
  ~RepeatCache() {
    std::lock_guard<std::mutex> lock(g_mutex);
    flush_locked();
    g_caches.erase(std::find(g_caches.begin(), g_caches.end(), this));
  }

  Slot& slot(uint64_t key) {
    const uint64_t current = g_generation.load(std::memory_order_acquire);
    if (C10_UNLIKELY(generation != current)) {
      std::lock_guard<std::mutex> lock(g_mutex);
      flush_locked();
      for (auto& s : slots) {
        s.key = 0;
        s.signature = nullptr;
      }
      generation = current;
    }
    return slots[key % kSlots];
  }

  // Under g_mutex: the counts into their signatures (or dropped, if a reset
  // came since they were counted).
  void flush_locked() {
    const bool current = epoch == g_reset_epoch;
    for (auto& s : slots) {
      const uint64_t n = s.calls.load(std::memory_order_relaxed);
      if (n > 0) {
        if (current) {
          s.signature->calls += n;
        }
        s.calls.store(0, std::memory_order_relaxed);
      }
    }
    epoch = g_reset_epoch;
  }

  // Under g_mutex: the slot becomes `signature`'s, its previous count moved
  // to its previous signature.
  static void take_locked(RepeatCache* cache, Slot& s, uint64_t key, SignatureCounts* signature) {
    const uint64_t n = s.calls.load(std::memory_order_relaxed);
    if (n > 0) {
      if (cache->epoch == g_reset_epoch) {
        s.signature->calls += n;
      }
      s.calls.store(0, std::memory_order_relaxed);
    }
    s.key = key;
    s.signature = signature;
  }
};

// Under g_mutex: every signature's calls, with the repeats threads hold.
std::unordered_map<const SignatureCounts*, uint64_t> pending_repeats_locked() {
  std::unordered_map<const SignatureCounts*, uint64_t> pending;
  for (const RepeatCache* cache : g_caches) {
    if (cache->epoch != g_reset_epoch) {
      continue; // counted before the last reset
    }
    for (const auto& s : cache->slots) {
      const uint64_t n = s.calls.load(std::memory_order_relaxed);
      if (n > 0) {
        pending[s.signature] += n;
      }
    }
  }
  return pending;
}

uint64_t calls_of(const SignatureCounts& signature,
                  const std::unordered_map<const SignatureCounts*, uint64_t>& pending) {
  const auto found = pending.find(&signature);
  return signature.calls + (found != pending.end() ? found->second : 0);
}

// A forked child keeps what its parent compiled (the real product's
// in-memory NEFF cache is copied too), but not a lock another thread held.
const bool g_fork_handler = on_fork_child([] { recreate_lock(g_mutex); });
py::object* g_callback = nullptr; // leaked on purpose: outlives interpreter teardown

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

// The text of a signature, as the persistent cache records it.
std::string describe_signature(const std::string& op, const std::vector<c10::IValue>& args) {
  std::ostringstream os;
  os << op << "(";
  for (size_t i = 0; i < args.size(); ++i) {
    os << (i == 0 ? "" : ", ");
    describe_value(os, args[i]);
  }
  os << ")";
  return os.str();
}

// The argument with every tensor replaced by a meta tensor of the same
// sizes, strides and dtype: what a listener needs to trace or lower the op,
// without the data.
c10::IValue to_meta(const c10::IValue& v) {
  if (v.isTensor()) {
    const auto& t = v.toTensor();
    if (!t.defined() || t.layout() != c10::kStrided) {
      return c10::IValue();
    }
    return at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kMeta));
  }
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const auto& e : v.toListRef()) {
      auto meta = to_meta(e);
      out.push_back(meta.isTensor() ? meta.toTensor() : at::Tensor());
    }
    return out;
  }
  if (v.isList()) {
    auto list = v.toList();
    c10::impl::GenericList out(list.elementType());
    for (const auto& e : list) {
      out.push_back(to_meta(e));
    }
    return out;
  }
  return v;
}

std::string hex_key(uint64_t h) {
  std::ostringstream key;
  key << std::hex << std::setw(16) << std::setfill('0') << h;
  return key.str();
}

const c10::OperatorHandle& contiguity_op() {
  static const c10::OperatorHandle op =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::contiguous", "");
  return op;
}

void notify_new_signature(
    py::object* callback,
    const std::string& name,
    uint64_t h,
    const std::vector<c10::IValue>& args) {
  const std::string text = describe_signature(name, args);
  std::vector<c10::IValue> meta;
  meta.reserve(args.size());
  for (const auto& a : args) {
    meta.push_back(to_meta(a));
  }
  const std::string key = hex_key(h);
  py::gil_scoped_acquire gil;
  try {
    py::tuple py_args(meta.size());
    for (size_t i = 0; i < meta.size(); ++i) {
      py_args[i] = torch::jit::toPyObject(meta[i]);
    }
    (*callback)(name, key, text, py_args);
  } catch (py::error_already_set& e) {
    // An interrupt (Ctrl-C, or SIGTERM turned into one by the pilot) that lands in
    // the callback belongs to the user: propagate it. The op has not run yet, so
    // nothing is half-done.
    if (e.matches(PyExc_KeyboardInterrupt) || e.matches(PyExc_SystemExit)) {
      throw;
    }
    // Any other failure of accounting must never break the computation it observes.
    e.discard_as_unraisable(__func__);
  }
}

} // namespace

namespace detail {
std::atomic<bool> g_accounting_enabled{false};
} // namespace detail

void account_signature(
    const c10::FunctionSchema& schema,
    uint64_t args_hash,
    c10::function_ref<std::vector<c10::IValue>()> box_args) {
  uint64_t repeat_key = args_hash;
  mix_hash(repeat_key, reinterpret_cast<uintptr_t>(&schema));
  repeat_key |= 1; // 0 marks an empty slot
  RepeatCache* repeats = PerThread<RepeatCache>::get();
  RepeatCache::Slot* cached = repeats != nullptr ? &repeats->slot(repeat_key) : nullptr;
  if (cached != nullptr && cached->key == repeat_key) {
    cached->count_one();
    if (C10_UNLIKELY(device_trace_recording())) {
      note_device_work(DeviceWork::kKernel, cached->signature->key);
    }
    return;
  }
  // The op's own hash is cached per schema so the hot path never formats a
  // string; the arguments were hashed by the caller, outside the lock.
  uint64_t h = g_salt.load(std::memory_order_relaxed);
  std::string name;
  py::object* callback = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto [it, inserted] = g_ops.try_emplace(&schema);
    auto& counts = it->second;
    if (inserted) {
      std::ostringstream os;
      os << schema.operator_name();
      counts.name = os.str();
      counts.name_hash = std::hash<std::string>{}(counts.name);
    }
    mix_hash(h, counts.name_hash);
    mix_hash(h, args_hash);
    auto& signature = g_signatures[h];
    signature.op = &counts;
    signature.key = h;
    ++signature.calls;
    if (C10_UNLIKELY(device_trace_recording())) {
      note_device_work(DeviceWork::kKernel, h);
    }
    if (cached != nullptr) { // not a thread that is ending
      if (repeats->epoch != g_reset_epoch) {
        repeats->flush_locked(); // drops counts from before a reset this thread has not seen
      }
      RepeatCache::take_locked(repeats, *cached, repeat_key, &signature);
    }
    if (signature.seen) {
      return;
    }
    signature.seen = true;
    ++g_first_calls;
    ++g_seen;
    ++counts.signatures;
    if (g_callback == nullptr) {
      return;
    }
    callback = g_callback;
    name = counts.name;
  }
  notify_new_signature(callback, name, h, box_args());
}

void account_contiguity_kernels(const KeyBuilder& key) {
  // The real product makes a strided input contiguous with its own kernel
  // before the op runs.
  for (const at::Tensor* input : key.non_contiguous()) {
    KeyBuilder contiguity;
    contiguity.tensor(*input);
    account_signature(contiguity_op().schema(), contiguity.hash(), [&] {
      return std::vector<c10::IValue>{*input};
    });
  }
}

static KeyBuilder boxed_key(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args) {
  const auto masks = argument_masks(op.schema());
  KeyBuilder key;
  for (size_t i = 0; i < args.size(); ++i) {
    const auto bit = i < 64 ? uint64_t{1} << i : 0;
    key.value(args[i], (masks.is_static & bit) != 0, (masks.is_out & bit) != 0);
  }
  return key;
}

void account_kernel(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  const size_t n = op.schema().arguments().size();
  const c10::ArrayRef<c10::IValue> args(stack.data() + stack.size() - n, n);
  account_call(op.schema(), boxed_key(op, args), [&] { return args.vec(); });
}

std::string signature_key(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args) {
  std::ostringstream name;
  name << op.schema().operator_name();
  uint64_t h = g_salt.load();
  mix_hash(h, std::hash<std::string>{}(name.str()));
  mix_hash(h, boxed_key(op, args).hash());
  return hex_key(h);
}

void set_accounting(bool enabled, uint64_t salt) {
  g_salt = salt;
  g_generation.fetch_add(1);
  detail::g_accounting_enabled = enabled;
}

uint64_t accounting_salt() {
  return g_salt.load();
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
  AccountingStats stats{0, 0, g_seen, {}};
  const auto pending = pending_repeats_locked();
  std::unordered_map<const OpCounts*, uint64_t> calls_per_op;
  for (const auto& [key, signature] : g_signatures) {
    const uint64_t calls = calls_of(signature, pending);
    if (calls > 0) {
      calls_per_op[signature.op] += calls;
    }
  }
  for (const auto& [key, counts] : g_ops) {
    const auto found = calls_per_op.find(&counts);
    if (found != calls_per_op.end()) {
      stats.calls += found->second;
      stats.ops.push_back({counts.name, found->second, counts.signatures});
    }
  }
  // A repeat counted by another thread after the sum could exceed it: never below zero.
  stats.repeats = stats.calls > g_first_calls ? stats.calls - g_first_calls : 0;
  return stats;
}

std::vector<std::pair<std::string, uint64_t>> signature_calls() {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::vector<std::pair<std::string, uint64_t>> out;
  const auto pending = pending_repeats_locked();
  for (const auto& [key, signature] : g_signatures) {
    const uint64_t calls = calls_of(signature, pending);
    if (calls > 0) {
      out.emplace_back(hex_key(key), calls);
    }
  }
  return out;
}

void reset_accounting() {
  std::lock_guard<std::mutex> lock(g_mutex);
  for (auto& [key, signature] : g_signatures) {
    signature.calls = 0;
    signature.seen = false;
  }
  g_seen = 0;
  for (auto& [key, counts] : g_ops) {
    counts.signatures = 0;
  }
  g_first_calls = 0;
  ++g_reset_epoch; // what threads counted so far is dropped
  g_generation.fetch_add(1);
}

void forget_signatures() {
  std::lock_guard<std::mutex> lock(g_mutex);
  for (auto& [key, signature] : g_signatures) {
    signature.seen = false;
  }
  g_seen = 0;
  g_generation.fetch_add(1);
}

} // namespace torch_neuronx
