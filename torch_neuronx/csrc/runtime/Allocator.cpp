// Emulated HBM: host memory accounted per logical NeuronCore.
//
// Every byte handed out for a neuron tensor is charged to the core it lives
// on and checked against that core's HBM capacity, so an out-of-memory on the
// emulated device happens where it would on Trainium, with a clear
// torch.OutOfMemoryError, and leaves the process usable. There is no caching:
// reserved == allocated, and empty_cache() has nothing to return.
//
// It subclasses c10::DeviceAllocator so that torch.accelerator.memory_* and
// the torch.cuda-style API work on the `neuron` device.
#include "runtime/Allocator.h"
#include "runtime/Device.h"
#include "runtime/Fork.h"
#include "runtime/HostPool.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

#include <cstring>
#include <memory>
#include <mutex>

namespace torch_neuronx {
namespace {

using c10::CachingDeviceAllocator::DeviceStats;
using c10::CachingAllocator::StatType;

constexpr size_t kSmallPoolLimit = 1 << 20; // the real allocator's small pool

// Without a cache every allocation is its own segment, always active, and
// reserved == allocated == requested: one byte stat and one block stat per
// pool say everything, and DeviceStats is filled from them when asked.
struct CoreMemory {
  std::mutex mutex;
  int64_t capacity = 0;
  c10::CachingAllocator::StatArray bytes;
  c10::CachingAllocator::StatArray blocks;
  int64_t num_ooms = 0;
  int64_t num_device_alloc = 0;
  int64_t num_device_free = 0;

  DeviceStats snapshot() const {
    DeviceStats s;
    s.allocated_bytes = s.reserved_bytes = s.active_bytes = s.requested_bytes = bytes;
    s.allocation = s.segment = s.active = blocks;
    s.num_ooms = num_ooms;
    s.num_device_alloc = num_device_alloc;
    s.num_device_free = num_device_free;
    return s;
  }
};

// Per-allocation bookkeeping carried in the DataPtr context.
struct Charge {
  size_t bytes;
  c10::DeviceIndex device;
  c10::Storage adopted; // set when the bytes belong to an adopted CPU storage
  void* owned;          // set when we allocated the bytes ourselves
  c10::DataPtr taken;   // set when the bytes were taken from a CPU storage in place
};

class NeuronAllocator final : public c10::DeviceAllocator {
 public:
  void configure(int64_t count, int64_t capacity) {
    std::lock_guard<std::mutex> lock(config_mutex_);
    // Cores are created once and never destroyed: live DataPtrs point at them.
    while (static_cast<int64_t>(cores_.size()) < count) {
      cores_.push_back(std::make_unique<CoreMemory>());
    }
    for (auto& core : cores_) {
      std::lock_guard<std::mutex> core_lock(core->mutex);
      core->capacity = capacity;
    }
  }

  CoreMemory& core(c10::DeviceIndex index) {
    check_device_index(index);
    return *cores_.at(index);
  }

  // Charge `bytes` to a core, or raise OutOfMemoryError without side effects.
  void charge(c10::DeviceIndex index, size_t bytes) {
    mark_runtime_initialized();
    auto& mem = core(index);
    std::lock_guard<std::mutex> lock(mem.mutex);
    const auto allocated = mem.bytes[0].current;
    if (allocated + static_cast<int64_t>(bytes) > mem.capacity) {
      mem.num_ooms += 1;
      TORCH_CHECK_WITH(
          OutOfMemoryError, false,
          "Neuron out of memory on neuron:", static_cast<int>(index),
          " (emulated HBM): tried to allocate ", bytes, " bytes; ",
          mem.capacity - allocated, " bytes free of ", mem.capacity,
          " bytes capacity (", allocated,
          " bytes already allocated). Reduce the batch or sequence length, "
          "shard the model over more cores, or pick a larger instance profile "
          "(TORCHNEURON_INSTANCE).");
    }
    update(mem, bytes, /*increase=*/true);
  }

  void uncharge(c10::DeviceIndex index, size_t bytes) {
    auto& mem = *cores_.at(index);
    std::lock_guard<std::mutex> lock(mem.mutex);
    update(mem, bytes, /*increase=*/false);
  }

  static void release(void* ctx) {
    auto* charge = static_cast<Charge*>(ctx);
    instance().uncharge(charge->device, charge->bytes);
    if (charge->owned != nullptr) {
      host_pool_free(charge->owned, charge->bytes); // adopted memory is freed by its storage
    }
    delete charge;
  }

  static NeuronAllocator& instance();

  c10::DataPtr allocate(size_t nbytes) override {
    const auto index = current_device();
    charge(index, nbytes);
    void* data = nullptr;
    if (nbytes > 0) {
      try {
        data = host_pool_allocate(nbytes);
      } catch (...) {
        uncharge(index, nbytes);
        throw;
      }
    }
    auto* ctx = new Charge{nbytes, index, {}, data, {}};
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
    auto& mem = core(index);
    std::lock_guard<std::mutex> lock(mem.mutex);
    return mem.snapshot();
  }

  void resetAccumulatedStats(c10::DeviceIndex index) override {
    auto& mem = core(index);
    std::lock_guard<std::mutex> lock(mem.mutex);
    clear_accumulated(mem);
  }

  void resetPeakStats(c10::DeviceIndex index) override {
    auto& mem = core(index);
    std::lock_guard<std::mutex> lock(mem.mutex);
    clear_peaks(mem);
  }

  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex index) override {
    auto& mem = core(index);
    std::lock_guard<std::mutex> lock(mem.mutex);
    const auto used = mem.bytes[0].current;
    return {static_cast<size_t>(mem.capacity - used),
            static_cast<size_t>(mem.capacity)};
  }

  int64_t capacity(c10::DeviceIndex index) {
    auto& mem = core(index);
    std::lock_guard<std::mutex> lock(mem.mutex);
    return mem.capacity;
  }

  // In a forked child (Fork.h): fresh locks. The child holds the parent's
  // tensors (fork copied them), so current usage stays; peaks and cumulative
  // counts start over, as they describe this process's life.
  void after_fork() {
    recreate_lock(config_mutex_);
    for (auto& core : cores_) {
      recreate_lock(core->mutex);
      clear_accumulated(*core);
      clear_peaks(*core);
    }
  }

 private:
  static void clear_accumulated(CoreMemory& mem) {
    for (auto* array : {&mem.bytes, &mem.blocks}) {
      for (auto& stat : *array) {
        stat.reset_accumulated();
      }
    }
    mem.num_ooms = 0;
    mem.num_device_alloc = 0;
    mem.num_device_free = 0;
  }

  static void clear_peaks(CoreMemory& mem) {
    for (auto* array : {&mem.bytes, &mem.blocks}) {
      for (auto& stat : *array) {
        stat.reset_peak();
      }
    }
  }

  static void update(CoreMemory& mem, size_t bytes, bool increase) {
    const size_t pool = static_cast<size_t>(
        bytes < kSmallPoolLimit ? StatType::SMALL_POOL : StatType::LARGE_POOL);
    for (size_t i : {static_cast<size_t>(StatType::AGGREGATE), pool}) {
      if (increase) {
        mem.bytes[i].increase(bytes);
        mem.blocks[i].increase(1);
      } else {
        mem.bytes[i].decrease(bytes);
        mem.blocks[i].decrease(1);
      }
    }
    increase ? ++mem.num_device_alloc : ++mem.num_device_free;
  }

  std::mutex config_mutex_;
  std::vector<std::unique_ptr<CoreMemory>> cores_;
};

NeuronAllocator g_allocator;

NeuronAllocator& NeuronAllocator::instance() {
  return g_allocator;
}

const bool g_fork_handler = on_fork_child([] { g_allocator.after_fork(); });

} // namespace

REGISTER_ALLOCATOR(kNeuron, &g_allocator);

void configure_devices(int64_t count, int64_t capacity_bytes) {
  TORCH_CHECK(count >= 0 && count <= 128,
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
  auto* ctx = new Charge{bytes, index, cpu_storage, nullptr, {}};
  return {data, ctx, &NeuronAllocator::release, c10::Device(kNeuron, index)};
}

void adopt_cpu_storage_in_place(c10::StorageImpl& storage, c10::DeviceIndex index) {
  const size_t bytes = storage.nbytes();
  g_allocator.charge(index, bytes);
  void* data = storage.mutable_data();
  auto* ctx = new Charge{bytes, index, {}, nullptr, std::move(storage.mutable_data_ptr())};
  storage.set_data_ptr_noswap(
      c10::DataPtr(data, ctx, &NeuronAllocator::release, c10::Device(kNeuron, index)));
  storage.set_allocator(&g_allocator);
}

} // namespace torch_neuronx
