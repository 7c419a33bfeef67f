// Device topology and the thread-local current device.
//
// The number of logical NeuronCores and their HBM size come from the instance
// profile chosen in Python; C++ only stores them. The current device is
// thread-local, with a process-wide default (as in CUDA), so a thread pool
// loading weights does not race with the main thread.
#include "runtime/Device.h"
#include "runtime/Fork.h"
#include "runtime/PerThread.h"

#include <atomic>
#include <mutex>

namespace torch_neuronx {
std::atomic<int> g_device_count{0};
std::atomic<bool> g_initialized{false};
namespace {
std::atomic<int> g_default_device{0};
thread_local int t_current_device TORCH_NEURONX_FAST_TLS = -1;
std::mutex g_init_error_mutex;
std::string g_init_error;
std::atomic<bool> g_has_init_error{false};
// The real product's Python-level flags (TR torch_neuronx/__init__.py:131-173).
std::atomic<bool> g_initialized_from_python{false};
std::atomic<bool> g_in_bad_fork{false};

// The real product's os.register_at_fork hook: a child of an initialised
// parent may not initialise again (sticky for its own children). The C++
// flag (g_initialized) stays set, as the real runtime's does.
void after_fork() {
  if (g_initialized_from_python.exchange(false)) {
    g_in_bad_fork = true;
  }
  recreate_lock(g_init_error_mutex);
}
const bool g_fork_handler = on_fork_child(&after_fork);
} // namespace

void set_device_count(int64_t count) {
  g_device_count = static_cast<int>(count);
  if (g_default_device.load() >= count) {
    g_default_device = 0;
  }
}

c10::DeviceIndex device_count() noexcept {
  return static_cast<c10::DeviceIndex>(g_device_count.load());
}

[[noreturn]] void invalid_device_index(c10::DeviceIndex index) {
  TORCH_CHECK(
      false,
      "Invalid neuron device index ", static_cast<int>(index),
      ": this process sees ", static_cast<int>(device_count()),
      " logical NeuronCore(s) (valid indices 0..",
      static_cast<int>(device_count()) - 1,
      "). Check TORCHNEURON_INSTANCE, NEURON_RT_VISIBLE_CORES and "
      "NEURON_RT_NUM_CORES.");
}

c10::DeviceIndex current_device() {
  int d = t_current_device;
  return static_cast<c10::DeviceIndex>(d >= 0 ? d : g_default_device.load());
}

void set_current_device(c10::DeviceIndex index) {
  check_device_index(index);
  t_current_device = index;
}

void set_default_device(c10::DeviceIndex index) {
  check_device_index(index);
  g_default_device = index;
  t_current_device = index;
}

bool runtime_initialized() {
  return g_initialized.load();
}

void initialize_on_first_use() {
  if (g_has_init_error.load()) {
    std::lock_guard<std::mutex> lock(g_init_error_mutex);
    if (!g_init_error.empty()) {
      TORCH_CHECK(false, g_init_error);
    }
  }
  g_initialized = true;
}

void initialize_runtime() {
  TORCH_CHECK(!g_in_bad_fork.load(),
              "Cannot re-initialize Neuron runtime in forked subprocess. "
              "To use Neuron with multiprocessing, use the 'spawn' start method");
  mark_runtime_initialized();
  g_initialized_from_python = true;
}

bool in_bad_fork() {
  return g_in_bad_fork.load();
}

void set_init_error(std::string message) {
  std::lock_guard<std::mutex> lock(g_init_error_mutex);
  g_has_init_error = !message.empty();
  g_init_error = std::move(message);
}

} // namespace torch_neuronx
