// PrivateUse1 hooks and pinned host memory.
//
// The hooks are how PyTorch's generic code (torch.accelerator, storage
// resize for FSDP2, torch.Generator(device="neuron")) reaches the runtime;
// the generators they hand out are in Generators.cpp.
#include "runtime/Allocator.h"
#include "runtime/Device.h"
#include "runtime/Fork.h"
#include "runtime/Generators.h"

#include <ATen/core/GeneratorForPrivateuseone.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/alloc_cpu.h>

#include <cstring>
#include <map>
#include <mutex>

namespace torch_neuronx {
namespace {

// Pinned host memory: ordinary host memory, remembered so that
// tensor.is_pinned() is true for what pin_memory() returned (DataLoader and
// Accelerate check it before non_blocking copies).
class PinnedHostAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    void* data = nbytes > 0 ? c10::alloc_cpu(nbytes) : nullptr;
    if (data != nullptr) {
      std::lock_guard<std::mutex> lock(mutex_);
      blocks_.emplace(reinterpret_cast<uintptr_t>(data), nbytes);
    }
    return {data, data, &PinnedHostAllocator::release, c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override {
    return &PinnedHostAllocator::release;
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }

  // True for any address inside a pinned block, as cudaPointerGetAttributes.
  bool contains(const void* ptr) {
    const auto address = reinterpret_cast<uintptr_t>(ptr);
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.upper_bound(address);
    if (it == blocks_.begin()) {
      return false;
    }
    --it;
    return address < it->first + it->second;
  }

  // In a forked child (Fork.h).
  void after_fork() {
    recreate_lock(mutex_);
  }

  static PinnedHostAllocator& instance() {
    // Leaked on purpose: pinned tensors may be freed during interpreter exit.
    static auto* allocator = new PinnedHostAllocator();
    return *allocator;
  }

 private:
  static void release(void* data) {
    {
      auto& self = instance();
      std::lock_guard<std::mutex> lock(self.mutex_);
      self.blocks_.erase(reinterpret_cast<uintptr_t>(data));
    }
    c10::free_cpu(data);
  }

  std::mutex mutex_;
  std::map<uintptr_t, size_t> blocks_; // start address -> size
};

// In a forked child (Fork.h): a fresh lock for the pinned-block table.
void after_fork() {
  PinnedHostAllocator::instance().after_fork();
}
const bool g_fork_handler = on_fork_child(&after_fork);

class NeuronHooks final : public at::PrivateUse1HooksInterface {
 public:
  bool isBuilt() const override {
    return true;
  }

  bool isAvailable() const override {
    return device_count() > 0;
  }

  bool hasPrimaryContext(c10::DeviceIndex) const override {
    return runtime_initialized();
  }

  c10::DeviceIndex deviceCount() const override {
    return device_count();
  }

  void setCurrentDevice(c10::DeviceIndex index) const override {
    set_current_device(index);
  }

  c10::DeviceIndex getCurrentDevice() const override {
    return current_device();
  }

  c10::DeviceIndex exchangeDevice(c10::DeviceIndex index) const override {
    const auto previous = current_device();
    set_current_device(index);
    return previous;
  }

  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex index) const override {
    return exchangeDevice(index);
  }

  const at::Generator& getDefaultGenerator(c10::DeviceIndex index) const override {
    return default_generator(index);
  }

  at::Generator getNewGenerator(c10::DeviceIndex index) const override {
    return at::make_generator<NeuronGenerator>(
        index < 0 ? current_device() : index, c10::default_rng_seed_val);
  }

  c10::Device getDeviceFromPtr(void*) const override {
    return c10::Device(kNeuron, current_device());
  }

  bool isPinnedPtr(const void* ptr) const override {
    return ptr != nullptr && PinnedHostAllocator::instance().contains(ptr);
  }

  c10::Allocator* getPinnedMemoryAllocator() const override {
    return &PinnedHostAllocator::instance();
  }

  // FSDP2 frees and re-allocates parameter storage with storage.resize_().
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    auto* impl = storage.unsafeGetStorageImpl();
    TORCH_CHECK(impl->resizable(), "Trying to resize storage that is not resizable");
    const auto index = impl->data_ptr().device().index();
    c10::DeviceGuard guard(c10::Device(kNeuron, index < 0 ? current_device() : index));
    c10::DataPtr fresh = allocator()->allocate(newsize);
    const size_t keep = std::min(newsize, impl->nbytes());
    if (keep > 0) {
      std::memcpy(fresh.get(), impl->data(), keep);
    }
    impl->set_data_ptr_noswap(std::move(fresh));
    impl->set_nbytes(newsize);
  }
};

} // namespace

static bool register_hooks() {
  at::RegisterPrivateUse1HooksInterface(new NeuronHooks());
  return true;
}
static const bool g_hooks_registered = register_hooks();

} // namespace torch_neuronx
