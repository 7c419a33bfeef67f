// The eager kernel key: hashing one call's arguments (see KernelKey.h).
#include "accounting/KernelKey.h"
#include "runtime/Fork.h"
#include "runtime/PerThread.h"

#include <array>
#include <atomic>
#include <mutex>

namespace torch_neuronx {
namespace {

std::mutex g_rows_mutex;
std::vector<std::pair<std::string, std::string>> g_rows;
// Bumped by set_static_arguments: invalidates every thread's mask cache.
std::atomic<uint64_t> g_rows_generation{1};
// A forked child keeps the rows, not a lock another thread held (runtime/Fork.h).
const bool g_fork_handler = on_fork_child([] { recreate_lock(g_rows_mutex); });

// Computations of a mask (a schema not in the calling thread's cache).
std::atomic<uint64_t> g_mask_computations{0};

// '*' matches any run of characters.
bool glob_match(const char* pattern, const char* text) {
  if (*pattern == '\0') {
    return *text == '\0';
  }
  if (*pattern == '*') {
    return glob_match(pattern + 1, text) || (*text != '\0' && glob_match(pattern, text + 1));
  }
  return *pattern == *text && glob_match(pattern + 1, text + 1);
}

ArgumentMasks compute_masks(const c10::FunctionSchema& schema) {
  g_mask_computations.fetch_add(1, std::memory_order_relaxed);
  const std::string& name = schema.name();
  const std::string overload =
      schema.overload_name().empty() ? name : name + "." + schema.overload_name();
  const auto& arguments = schema.arguments();
  ArgumentMasks masks;
  for (size_t i = 0; i < arguments.size() && i < 64; ++i) {
    const auto& alias = arguments[i].alias_info();
    if (arguments[i].kwarg_only() && alias != nullptr && alias->isWrite()) {
      masks.is_out |= uint64_t{1} << i;
    }
  }
  std::lock_guard<std::mutex> lock(g_rows_mutex);
  for (const auto& [pattern, argument] : g_rows) {
    if (!glob_match(pattern.c_str(), name.c_str()) &&
        !glob_match(pattern.c_str(), overload.c_str())) {
      continue;
    }
    for (size_t i = 0; i < arguments.size() && i < 64; ++i) {
      if (arguments[i].name() == argument) {
        masks.is_static |= uint64_t{1} << i;
      }
    }
  }
  return masks;
}

// Per-thread masks by schema, open addressing with linear probing: a schema
// keeps its slot until the rows change, so the schemas a step alternates
// between never evict each other (a direct-mapped table let two of a decode
// step's schemas share a slot, recomputing both on every call in some
// processes: its layout depends on where the schemas were allocated).
struct MaskCache {
  struct Slot {
    const c10::FunctionSchema* schema = nullptr;
    ArgumentMasks masks;
  };
  static constexpr size_t kSlots = 1024; // a power of two
  static constexpr size_t kMaxUsed = kSlots * 3 / 4; // probes stay short
  uint64_t generation = 0;
  size_t used = 0;
  std::array<Slot, kSlots> slots{};

  ArgumentMasks get(const c10::FunctionSchema& schema, uint64_t current) {
    if (C10_UNLIKELY(generation != current || used == kMaxUsed)) {
      slots.fill({}); // new rows, or more schemas than a run alternates between
      used = 0;
      generation = current;
    }
    // Fibonacci hashing: schemas are heap objects of similar sizes, whose
    // low address bits repeat.
    size_t i = (reinterpret_cast<uintptr_t>(&schema) * 0x9e3779b97f4a7c15ULL) >> 54;
    for (;; i = (i + 1) % kSlots) {
      Slot& slot = slots[i];
      if (slot.schema == &schema) {
        return slot.masks;
      }
      if (slot.schema == nullptr) {
        slot = {&schema, compute_masks(schema)};
        ++used;
        return slot.masks;
      }
    }
  }
};
static_assert(MaskCache::kSlots == size_t{1} << (64 - 54), "the hash keeps log2(kSlots) bits");

} // namespace

void KeyBuilder::value(const c10::IValue& v, bool is_static, bool is_out) {
  if (v.isTensor()) {
    tensor(v.toTensor(), is_out);
  } else if (v.isList()) {
    // Tensor lists too; their elements live in the list the caller holds.
    for (const auto& e : v.toListRef()) {
      value(e, is_static, is_out);
    }
  } else if (v.isInt()) {
    integer(v.toInt(), is_static);
  } else if (v.isDouble()) {
    floating(v.toDouble(), is_static);
  } else if (v.isBool()) {
    boolean(v.toBool(), is_static);
  } else if (v.isComplexDouble()) {
    complex(v.toComplexDouble(), is_static);
  } else if (v.isString()) {
    mix(is_static ? std::hash<std::string>{}(v.toStringRef()) : kString);
  } else if (v.isNone()) {
    none();
  }
  // Devices and generators do not change the compiled kernel.
}

ArgumentMasks argument_masks(const c10::FunctionSchema& schema) {
  const uint64_t generation = g_rows_generation.load(std::memory_order_acquire);
  MaskCache* cache = PerThread<MaskCache>::get();
  return cache != nullptr ? cache->get(schema, generation) : compute_masks(schema);
}

uint64_t argument_mask_computations() {
  return g_mask_computations.load(std::memory_order_relaxed);
}

void set_static_arguments(std::vector<std::pair<std::string, std::string>> rows) {
  for (const auto& [pattern, argument] : rows) {
    TORCH_CHECK(!pattern.empty() && !argument.empty(),
                "static argument rows need an op pattern and an argument name, got ('",
                pattern, "', '", argument, "')");
  }
  std::lock_guard<std::mutex> lock(g_rows_mutex);
  g_rows = std::move(rows);
  g_rows_generation.fetch_add(1);
}

} // namespace torch_neuronx
