// Emulated HBM: each logical NeuronCore's memory, managed by the caching
// segment allocator of the real product (AllocatorPools.cpp) and backed by
// host memory (HostPool.cpp).
//
// Every neuron tensor's bytes get a block of its core's segments, and a new
// segment is checked against the core's HBM capacity, so an out-of-memory on
// the emulated device happens where it would on Trainium: when the reserved
// segments (not only the live tensors) reach the capacity, after the unused
// segments were released once. It raises torch.OutOfMemoryError naming the
// request and the core's allocated, reserved and free bytes, and leaves the
// process usable. The host memory behind a block is allocated and pooled
// separately (or is a CPU kernel's own, adopted), so the device layout costs
// the host nothing.
//
// It subclasses c10::DeviceAllocator so that torch.accelerator.memory_* and
// the torch.cuda-style API work on the `neuron` device.
#include "runtime/Allocator.h"
#include "runtime/AllocatorHistory.h"
#include "runtime/AllocatorPools.h"
#include "runtime/Device.h"
#include "runtime/HostPool.h"
#include "runtime/PerThread.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <mutex>

namespace torch_neuronx {
namespace {

using c10::CachingDeviceAllocator::DeviceStats;

// Per-allocation bookkeeping carried in the DataPtr context.
struct Charge {
  size_t bytes = 0;
  c10::DeviceIndex device = 0;
  Block* block = nullptr; // in the core's segments; none for zero bytes
  void* owned = nullptr; // set when we allocated the bytes ourselves
  c10::Storage adopted;  // set when the bytes belong to an adopted CPU storage
  c10::DataPtr taken;    // set when the bytes were taken from a CPU storage in place
};

// Records are recycled per thread: every op result is charged and released,
// and a heap allocation and free per result was a tenth of what a small op
// cost beyond CPU's. A record released on another thread joins that thread's
// spares.
struct SpareCharges {
  static constexpr int kMax = 32;
  std::array<Charge*, kMax> records{};
  int count = 0;
  ~SpareCharges() {
    while (count > 0) {
      delete records[--count];
    }
  }
};

Charge* new_charge(size_t bytes, c10::DeviceIndex device, Block* block) {
  SpareCharges* spares = PerThread<SpareCharges>::get();
  Charge* charge = spares != nullptr && spares->count > 0 ? spares->records[--spares->count]
                                                          : new Charge();
  charge->bytes = bytes;
  charge->device = device;
  charge->block = block;
  return charge;
}

// `charge` holds nothing any more (its memory was freed).
void recycle(Charge* charge) {
  SpareCharges* spares = PerThread<SpareCharges>::get();
  if (spares == nullptr || spares->count == SpareCharges::kMax) {
    delete charge;
    return;
  }
  spares->records[spares->count++] = charge;
}

class NeuronAllocator final : public c10::DeviceAllocator {
 public:
  void configure(int64_t count, int64_t capacity) {
    TORCH_CHECK(capacity >= 0 && capacity <= kMaxCoreBytes,
                "the neuron emulator accounts at most ", kMaxCoreBytes,
                " bytes of HBM per core, got ", capacity);
    for (int64_t i = 0; i < count; ++i) {
      capacity_[i].store(capacity, std::memory_order_relaxed);
    }
  }

  // A block of `bytes` in core `index`'s segments (none for zero bytes), or
  // OutOfMemoryError with nothing changed but the core's OOM count.
  Block* charge(c10::DeviceIndex index, size_t bytes) {
    mark_runtime_initialized();
    check_device_index(index);
    if (bytes == 0) {
      return nullptr;
    }
    Context context;
    if (C10_UNLIKELY(history_on())) {
      context = gather_context(RecordContext::STATE);
    }
    CorePools& core = core_pools(index);
    const int64_t capacity = capacity_[index].load(std::memory_order_relaxed);
    {
      std::lock_guard<CoreLock> lock(core.mutex());
      if (Block* block = core.allocate(bytes, capacity, std::move(context))) {
        return block;
      }
    }
    out_of_memory(core, index, bytes, capacity);
  }

  static void uncharge(c10::DeviceIndex index, Block* block) {
    if (block == nullptr) {
      return;
    }
    Context context;
    if (C10_UNLIKELY(history_on())) {
      context = gather_context(RecordContext::ALL);
    }
    CorePools& core = core_pools(index);
    std::lock_guard<CoreLock> lock(core.mutex());
    core.free(block, std::move(context));
  }

  static void release(void* ctx) {
    auto* charge = static_cast<Charge*>(ctx);
    uncharge(charge->device, charge->block);
    charge->block = nullptr;
    if (charge->owned != nullptr) {
      host_pool_free(charge->owned, charge->bytes);
      charge->owned = nullptr;
    }
    // Adopted memory is freed by its storage, taken memory by its CPU deleter.
    charge->adopted = c10::Storage();
    charge->taken.clear();
    recycle(charge);
  }

  c10::DataPtr allocate(size_t nbytes) override {
    const auto index = current_device();
    Block* block = charge(index, nbytes);
    void* data = nullptr;
    if (nbytes > 0) {
      try {
        data = host_pool_allocate(nbytes);
      } catch (...) {
        uncharge(index, block);
        throw;
      }
    }
    Charge* ctx = new_charge(nbytes, index, block);
    ctx->owned = data;
    return {data, ctx, &NeuronAllocator::release,
            c10::Device(kNeuron, index)};
  }

  c10::DeleterFnPtr raw_deleter() const override {
    return nullptr; // contexts differ from data pointers
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }

  bool initialized() override {
    return runtime_initialized();
  }

  // Every core's unused segments, and the host memory kept for reuse.
  void emptyCache(c10::MempoolId_t) override {
    for (CorePools* core : existing_core_pools()) {
      std::lock_guard<CoreLock> lock(core->mutex());
      core->release_unused_segments();
    }
    empty_host_pool();
  }

  void recordStream(const c10::DataPtr&, c10::Stream) override {}

  DeviceStats getDeviceStats(c10::DeviceIndex index) override {
    check_device_index(index);
    CorePools& core = core_pools(index);
    std::lock_guard<CoreLock> lock(core.mutex());
    return core.stats();
  }

  void resetAccumulatedStats(c10::DeviceIndex index) override {
    check_device_index(index);
    CorePools& core = core_pools(index);
    std::lock_guard<CoreLock> lock(core.mutex());
    core.reset_accumulated();
  }

  void resetPeakStats(c10::DeviceIndex index) override {
    check_device_index(index);
    CorePools& core = core_pools(index);
    std::lock_guard<CoreLock> lock(core.mutex());
    core.reset_peaks();
  }

  // Free is what new segments may still take, as the device reports it.
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex index) override {
    const int64_t total = capacity(index);
    CorePools& core = core_pools(index);
    std::lock_guard<CoreLock> lock(core.mutex());
    return {static_cast<size_t>(std::max<int64_t>(total - core.reserved_bytes(), 0)),
            static_cast<size_t>(total)};
  }

  int64_t capacity(c10::DeviceIndex index) {
    check_device_index(index);
    return capacity_[index].load(std::memory_order_relaxed);
  }

 private:
  // Out of line: the message's code kept every charge's path from being lean.
  [[noreturn]] C10_NOINLINE static void out_of_memory(
      CorePools& core, c10::DeviceIndex index, size_t bytes, int64_t capacity) {
    int64_t reserved = 0;
    int64_t allocated = 0;
    int64_t free = 0;
    {
      std::lock_guard<CoreLock> lock(core.mutex());
      core.count_oom();
      reserved = core.reserved_bytes();
      allocated = core.allocated_bytes();
      free = std::max<int64_t>(capacity - reserved, 0);
      core.trace().record(TraceAction::kOom, static_cast<uint64_t>(free), bytes);
    }
    TORCH_CHECK_WITH(
        OutOfMemoryError, false,
        "Neuron out of memory on neuron:", static_cast<int>(index),
        " (emulated HBM): tried to allocate ", bytes, " bytes (a ",
        segment_bytes(bytes), "-byte segment was needed); ", free, " bytes free of ",
        capacity, " bytes capacity; ", reserved, " bytes reserved in segments, ",
        allocated, " bytes allocated to tensors (the other ", reserved - allocated,
        " bytes reserved are cached blocks too small for this request). "
        "Reduce the batch or sequence length, shard the model over more cores, or pick a "
        "larger instance profile (TORCHNEURON_INSTANCE).");
  }

  std::array<std::atomic<int64_t>, kMaxCores> capacity_{};
};

NeuronAllocator g_allocator;

} // namespace

REGISTER_ALLOCATOR(kNeuron, &g_allocator);

void configure_devices(int64_t count, int64_t capacity_bytes) {
  TORCH_CHECK(count >= 0 && count <= kMaxCores,
              "the Neuron runtime supports at most 128 visible cores, got ", count);
  g_allocator.configure(count, capacity_bytes);
  set_device_count(count);
}

c10::DeviceAllocator* allocator() {
  return &g_allocator;
}

int64_t device_capacity(c10::DeviceIndex index) {
  return g_allocator.capacity(index);
}

c10::DataPtr adopt_cpu_storage(
    const c10::Storage& cpu_storage,
    c10::DeviceIndex index) {
  const size_t bytes = cpu_storage.nbytes();
  Block* block = g_allocator.charge(index, bytes);
  void* data = cpu_storage.mutable_data();
  Charge* ctx = new_charge(bytes, index, block);
  ctx->adopted = cpu_storage;
  return {data, ctx, &NeuronAllocator::release, c10::Device(kNeuron, index)};
}

void adopt_cpu_storage_in_place(c10::StorageImpl& storage, c10::DeviceIndex index) {
  const size_t bytes = storage.nbytes();
  Block* block = g_allocator.charge(index, bytes);
  void* data = storage.mutable_data();
  Charge* ctx = new_charge(bytes, index, block);
  ctx->taken = std::move(storage.mutable_data_ptr());
  storage.set_data_ptr_noswap(
      c10::DataPtr(data, ctx, &NeuronAllocator::release, c10::Device(kNeuron, index)));
  storage.set_allocator(&g_allocator);
}

} // namespace torch_neuronx
