// Emulated HBM: host memory accounted per logical NeuronCore.
//
// Every byte handed out for a neuron tensor is charged to the core it lives
// on and checked against that core's HBM capacity, so an out-of-memory on the
// emulated device happens where it would on Trainium, with a clear
// torch.OutOfMemoryError, and leaves the process usable. There is no caching:
// reserved == allocated, and empty_cache() has nothing to return.
//
// It subclasses c10::DeviceAllocator so that torch.accelerator.memory_* and
// the torch.cuda-style API work on the `neuron` device. The statistics are
// kept without a lock (AllocatorStats.cpp): every op result is charged and
// released here.
#include "runtime/Allocator.h"
#include "runtime/AllocatorStats.h"
#include "runtime/Device.h"
#include "runtime/Fork.h"
#include "runtime/HostPool.h"
#include "runtime/PerThread.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>

namespace torch_neuronx {
namespace {

using c10::CachingDeviceAllocator::DeviceStats;

// Per-allocation bookkeeping carried in the DataPtr context.
struct Charge {
  size_t bytes = 0;
  c10::DeviceIndex device = 0;
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

Charge* new_charge(size_t bytes, c10::DeviceIndex device) {
  SpareCharges* spares = PerThread<SpareCharges>::get();
  Charge* charge = spares != nullptr && spares->count > 0 ? spares->records[--spares->count]
                                                          : new Charge();
  charge->bytes = bytes;
  charge->device = device;
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

  // Charge `bytes` to a core, or raise OutOfMemoryError without side effects.
  void charge(c10::DeviceIndex index, size_t bytes) {
    mark_runtime_initialized();
    check_device_index(index);
    const int64_t capacity = capacity_[index].load(std::memory_order_relaxed);
    int64_t allocated = 0;
    if (C10_UNLIKELY(!charge_core(index, bytes, capacity, allocated))) {
      out_of_memory(index, bytes, capacity, allocated);
    }
  }

  static void release(void* ctx) {
    auto* charge = static_cast<Charge*>(ctx);
    release_core(charge->device, charge->bytes);
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
    charge(index, nbytes);
    void* data = nullptr;
    if (nbytes > 0) {
      try {
        data = host_pool_allocate(nbytes);
      } catch (...) {
        release_core(index, nbytes);
        throw;
      }
    }
    Charge* ctx = new_charge(nbytes, index);
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

  // Emulated HBM is never cached; the host memory behind it is.
  void emptyCache(c10::MempoolId_t) override {
    empty_host_pool();
  }

  void recordStream(const c10::DataPtr&, c10::Stream) override {}

  DeviceStats getDeviceStats(c10::DeviceIndex index) override {
    check_device_index(index);
    return core_stats(index);
  }

  void resetAccumulatedStats(c10::DeviceIndex index) override {
    check_device_index(index);
    reset_core_accumulated(index);
  }

  void resetPeakStats(c10::DeviceIndex index) override {
    check_device_index(index);
    reset_core_peaks(index);
  }

  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex index) override {
    const int64_t total = capacity(index);
    return {static_cast<size_t>(std::max<int64_t>(total - core_allocated_bytes(index), 0)),
            static_cast<size_t>(total)};
  }

  int64_t capacity(c10::DeviceIndex index) {
    check_device_index(index);
    return capacity_[index].load(std::memory_order_relaxed);
  }

 private:
  // Out of line: the message's code kept every charge's path from being lean.
  [[noreturn]] C10_NOINLINE static void out_of_memory(
      c10::DeviceIndex index, size_t bytes, int64_t capacity, int64_t allocated) {
    TORCH_CHECK_WITH(
        OutOfMemoryError, false,
        "Neuron out of memory on neuron:", static_cast<int>(index),
        " (emulated HBM): tried to allocate ", bytes, " bytes; ",
        capacity - allocated, " bytes free of ", capacity,
        " bytes capacity (", allocated,
        " bytes already allocated). Reduce the batch or sequence length, "
        "shard the model over more cores, or pick a larger instance profile "
        "(TORCHNEURON_INSTANCE).");
  }

  std::array<std::atomic<int64_t>, kMaxCores> capacity_{};
};

NeuronAllocator g_allocator;

// In a forked child (Fork.h): the child holds the parent's tensors (fork
// copied them), so live memory stays; peaks and cumulative counts start over,
// as they describe this process's life.
const bool g_fork_handler = on_fork_child(&core_stats_after_fork);

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
  g_allocator.charge(index, bytes);
  void* data = cpu_storage.mutable_data();
  Charge* ctx = new_charge(bytes, index);
  ctx->adopted = cpu_storage;
  return {data, ctx, &NeuronAllocator::release, c10::Device(kNeuron, index)};
}

void adopt_cpu_storage_in_place(c10::StorageImpl& storage, c10::DeviceIndex index) {
  const size_t bytes = storage.nbytes();
  g_allocator.charge(index, bytes);
  void* data = storage.mutable_data();
  Charge* ctx = new_charge(bytes, index);
  ctx->taken = std::move(storage.mutable_data_ptr());
  storage.set_data_ptr_noswap(
      c10::DataPtr(data, ctx, &NeuronAllocator::release, c10::Device(kNeuron, index)));
  storage.set_allocator(&g_allocator);
}

} // namespace torch_neuronx
