// Device guard, streams and events of the emulated device.
//
// Kernels run synchronously on the host, so every stream is always idle and
// every event has completed once recorded: query/synchronize are trivially
// true, which is honest. Streams still get distinct ids (FSDP2 creates
// several and switches between them), and events record host timestamps so
// Event.elapsed_time measures real elapsed time.
#include "runtime/Device.h"
#include "runtime/PerThread.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <array>
#include <atomic>
#include <chrono>

namespace torch_neuronx {
namespace {

using Clock = std::chrono::steady_clock;

struct EventRecord {
  Clock::time_point when;
};

constexpr int kMaxDevices = 128;
// Each thread's current stream per core. Behind a pointer (PerThread.h): this
// library's thread-locals must stay small.
struct CurrentStreams {
  std::array<c10::StreamId, kMaxDevices> ids{};
};
// The slot of `index` on this thread; a thread that is ending has only the default stream.
c10::StreamId& current_stream_slot(size_t index) {
  static thread_local c10::StreamId ending = 0;
  CurrentStreams* streams = PerThread<CurrentStreams>::get();
  return streams != nullptr ? streams->ids.at(index) : (ending = 0);
}
std::atomic<c10::StreamId> g_next_stream_id{1};

class NeuronGuardImpl final : public c10::impl::DeviceGuardImplInterface {
 public:
  c10::DeviceType type() const override {
    return kNeuron;
  }

  c10::Device exchangeDevice(c10::Device device) const override {
    const auto previous = getDevice();
    if (device.index() != previous.index()) {
      set_current_device(device.index());
    }
    return previous;
  }

  c10::Device getDevice() const override {
    return c10::Device(kNeuron, current_device());
  }

  void setDevice(c10::Device device) const override {
    set_current_device(device.index());
  }

  void uncheckedSetDevice(c10::Device device) const noexcept override {
    if (device.index() >= 0 && device.index() < device_count()) {
      set_current_device(device.index());
    }
  }

  c10::Stream getStream(c10::Device device) const override {
    return make_stream(device, current_stream_slot(index_of(device)));
  }

  c10::Stream getDefaultStream(c10::Device device) const override {
    return make_stream(device, 0);
  }

  c10::Stream getNewStream(c10::Device device, int /*priority*/) const override {
    return make_stream(device, g_next_stream_id++);
  }

  c10::Stream getStreamFromGlobalPool(c10::Device device, bool) const override {
    return make_stream(device, g_next_stream_id++);
  }

  c10::Stream exchangeStream(c10::Stream stream) const override {
    auto& slot = current_stream_slot(index_of(stream.device()));
    const auto previous = make_stream(stream.device(), slot);
    slot = stream.id();
    return previous;
  }

  c10::DeviceIndex deviceCount() const noexcept override {
    return device_count();
  }

  c10::DeviceCapability getDeviceCapability(c10::Device) const override {
    return c10::DeviceCapability(); // every dtype is accepted on the device
  }

  void record(
      void** event,
      const c10::Stream& stream,
      const c10::DeviceIndex,
      const c10::EventFlag) const override {
    TORCH_CHECK(stream.device_type() == kNeuron,
                "Event can only be recorded on a neuron stream, got ", stream);
    if (*event == nullptr) {
      *event = new EventRecord{};
    }
    static_cast<EventRecord*>(*event)->when = Clock::now();
  }

  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    delete static_cast<EventRecord*>(event);
  }

  void block(void*, const c10::Stream&) const override {}

  bool queryEvent(void*) const override {
    return true;
  }

  bool queryStream(const c10::Stream&) const override {
    return true;
  }

  void synchronizeStream(const c10::Stream&) const override {}

  void synchronizeEvent(void*) const override {}

  void synchronizeDevice(const c10::DeviceIndex) const override {}

  void recordDataPtrOnStream(const c10::DataPtr&, const c10::Stream&) const override {}

  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const override {
    TORCH_CHECK(start != nullptr && end != nullptr,
                "Both events must be recorded before calculating elapsed time.");
    const auto delta = static_cast<EventRecord*>(end)->when -
        static_cast<EventRecord*>(start)->when;
    return std::chrono::duration<double, std::milli>(delta).count();
  }

 private:
  static size_t index_of(c10::Device device) {
    return static_cast<size_t>(device.has_index() ? device.index() : current_device());
  }

  static c10::Stream make_stream(c10::Device device, c10::StreamId id) {
    const auto index = static_cast<c10::DeviceIndex>(index_of(device));
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(kNeuron, index), id);
  }
};

} // namespace

C10_REGISTER_GUARD_IMPL(PrivateUse1, NeuronGuardImpl);

} // namespace torch_neuronx
