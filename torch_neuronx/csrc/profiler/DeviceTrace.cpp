// The Kineto activity profiler of the `neuron` device (PyTorch's PrivateUse1
// profiler registry): torch.profiler with ProfilerActivity.PrivateUse1 gets
// one device event per kernel, graph and collective, linked to its CPU op.
//
// Kineto asks every registered profiler for a session when a profile starts.
// Ours exists only when the profile asks for device activity (kernels), so a
// CPU-only profile and a run without profiling pay nothing but the one
// relaxed load in device_trace_recording(). While the session records, it
// keeps the correlation ids PyTorch pushes for each op (per thread, the
// innermost last) and a note per unit of work issued. When the profile
// stops, the notes go to Python, which places them on the projected device
// timeline (torch_neuronx/profiling/timeline.py); the events it returns are
// given to Kineto here, each linked to the CPU op that issued it.
#ifndef USE_KINETO
// PyTorch's wheel is built with Kineto; its headers declare the plugin
// interface only under this macro.
#define USE_KINETO
#endif
// Kineto's headers format with fmt, whose compiled part libtorch keeps to itself.
#define FMT_HEADER_ONLY

#include "profiler/DeviceTrace.h"
#include "runtime/Device.h"
#include "runtime/Fork.h"
#include "runtime/PerThread.h"

#include <c10/util/ApproximateClock.h>
#include <libkineto.h>
#include <output_base.h>
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>
#include <torch/csrc/utils/pybind.h>

#include <deque>
#include <mutex>
#include <string>
#include <vector>

namespace py = pybind11;

namespace torch_neuronx {
namespace detail {
std::atomic<bool> g_device_trace_recording{false};
} // namespace detail

namespace {

struct Note {
  uint64_t payload;
  uint64_t correlation; // 0: issued outside any profiled op
  int64_t issue_ns;
  int32_t thread;
  int8_t device;
  uint8_t kind;
};

// The correlation ids Kineto pushed on this thread and not yet popped: ops
// and user scopes alike, so a graph run under `Torch-Compiled Region` links
// to its innermost scope. Stale once another session started.
struct CorrelationStack {
  std::vector<uint64_t> ids;
  uint64_t session = 0;
};

std::mutex g_mutex;
std::vector<std::deque<Note>> g_notes; // per core, under g_mutex
size_t g_limit = 0; // notes kept per core (the oldest dropped first); under g_mutex
uint64_t g_capture_mask = ~uint64_t{0}; // cores recorded; under g_mutex
std::atomic<uint64_t> g_session{0};
// A child forked while another thread noted work must not inherit the held lock.
const bool g_fork_handler = on_fork_child([] { recreate_lock(g_mutex); });
// Leaked on purpose, like the accounting's callback: they outlive interpreter teardown.
py::object* g_on_start = nullptr;
py::object* g_build = nullptr;

CorrelationStack* correlation_stack() {
  CorrelationStack* stack = PerThread<CorrelationStack>::get();
  if (stack != nullptr && stack->session != g_session.load(std::memory_order_relaxed)) {
    stack->ids.clear();
    stack->session = g_session.load(std::memory_order_relaxed);
  }
  return stack;
}

void push_correlation(uint64_t id) {
  if (CorrelationStack* stack = correlation_stack()) {
    stack->ids.push_back(id);
  }
}

void pop_correlation() {
  CorrelationStack* stack = correlation_stack();
  if (stack != nullptr && !stack->ids.empty()) {
    stack->ids.pop_back();
  }
}

libkineto::ActivityType activity_type(int kind) {
  switch (kind) {
    case 0:
      return libkineto::ActivityType::CONCURRENT_KERNEL; // device time, counted by key_averages
    case 1:
      return libkineto::ActivityType::GPU_USER_ANNOTATION; // engine busy spans, not counted
    default:
      return libkineto::ActivityType::PRIVATEUSE1_RUNTIME; // the host side of a launch
  }
}

class Session : public libkineto::IActivityProfilerSession {
 public:
  explicit Session(std::string custom_config) : custom_config_(std::move(custom_config)) {}

  void start() override {
    py::gil_scoped_acquire gil;
    // (limit per core, captured cores or None, device id, name, label, [(resource id, name)])
    py::tuple setup;
    try {
      setup = (*g_on_start)(custom_config_);
    } catch (py::error_already_set& e) { // never into Kineto: this profile records no device work
      errors_.push_back(e.what());
      return;
    }
    std::lock_guard<std::mutex> lock(g_mutex);
    g_limit = setup[0].cast<size_t>();
    g_capture_mask = setup[1].is_none() ? ~uint64_t{0} : setup[1].cast<uint64_t>();
    device_id_ = setup[2].cast<int64_t>();
    device_name_ = setup[3].cast<std::string>();
    device_label_ = setup[4].cast<std::string>();
    for (auto item : setup[5]) {
      auto pair = item.cast<py::tuple>();
      resources_.push_back({pair[0].cast<int64_t>(), pair[0].cast<int64_t>(), device_id_,
                            pair[1].cast<std::string>()});
    }
    g_notes.assign(static_cast<size_t>(std::max<int>(device_count(), 1)), {});
    g_session.fetch_add(1);
    detail::g_device_trace_recording = true;
  }

  void stop() override {
    detail::g_device_trace_recording = false;
  }

  std::vector<std::string> errors() override {
    return errors_;
  }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(logger, nullptr, 0, 0);
  }

  void processTrace(
      libkineto::ActivityLogger& logger,
      libkineto::getLinkedActivityCallback linked,
      int64_t start_ns,
      int64_t end_ns) override {
    buffer_ = std::make_unique<libkineto::CpuTraceBuffer>();
    buffer_->span = libkineto::TraceSpan(start_ns, end_ns, "neuron");
    buffer_->gpuOpCount = -1;
    std::vector<Note> notes = take_notes();
    py::gil_scoped_acquire gil;
    py::list records(notes.size());
    for (size_t i = 0; i < notes.size(); ++i) {
      const Note& n = notes[i];
      records[i] = py::make_tuple(n.kind, n.device, n.payload, n.correlation, n.issue_ns, n.thread);
    }
    py::object events;
    try {
      events = (*g_build)(records, start_ns, end_ns);
    } catch (py::error_already_set& e) {
      errors_.push_back(e.what());
      return;
    }
    for (auto item : events) {
      log_event(logger, linked, item.cast<py::tuple>());
    }
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    return std::make_unique<libkineto::DeviceInfo>(
        libkineto::DeviceInfo{device_id_, libkineto::kExceedMaxPid + device_id_, device_name_, device_label_});
  }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    return resources_;
  }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override {
    return std::move(buffer_);
  }

  void pushCorrelationId(uint64_t id) override {
    push_correlation(id);
  }
  void popCorrelationId() override {
    pop_correlation();
  }
  void pushUserCorrelationId(uint64_t id) override {
    push_correlation(id);
  }
  void popUserCorrelationId() override {
    pop_correlation();
  }

 private:
  static std::vector<Note> take_notes() {
    std::lock_guard<std::mutex> lock(g_mutex);
    std::vector<Note> out;
    for (auto& core : g_notes) {
      out.insert(out.end(), core.begin(), core.end());
      core.clear();
    }
    return out;
  }

  // (kind, name, device, resource, start ns, end ns, linked correlation, flow id, flow start,
  //  label, the event's figures as a JSON object)
  void log_event(
      libkineto::ActivityLogger& logger,
      const libkineto::getLinkedActivityCallback& linked,
      const py::tuple& e) {
    buffer_->emplace_activity(buffer_->span, activity_type(e[0].cast<int>()), e[1].cast<std::string>());
    auto& a = libkineto::CpuTraceBuffer::toRef(buffer_->activities.back());
    a.device = e[2].cast<int32_t>();
    a.resource = e[3].cast<int32_t>();
    a.startTime = e[4].cast<int64_t>();
    a.endTime = e[5].cast<int64_t>();
    const auto correlation = e[6].cast<int64_t>();
    if (correlation > 0 && linked) {
      a.linked = linked(static_cast<int32_t>(correlation));
    }
    // `id` stays 0: the flow has its own id, and PyTorch reads an event's id as the
    // correlation id of an op.
    const auto flow = e[7].cast<int64_t>();
    if (flow > 0) {
      a.flow.id = static_cast<uint32_t>(flow);
      a.flow.type = libkineto::kLinkAsyncCpuGpu;
      a.flow.start = e[8].cast<bool>();
    }
    // Two entries, not one per figure: a profile has thousands of events, and each entry is a
    // formatted string in a map.
    a.addMetadataQuoted("label", e[9].cast<std::string>());
    a.addMetadata("projection", e[10].cast<std::string>());
    a.log(logger);
  }

  std::string custom_config_;
  int64_t device_id_ = 0;
  std::string device_name_;
  std::string device_label_;
  std::vector<libkineto::ResourceInfo> resources_;
  std::vector<std::string> errors_;
  std::unique_ptr<libkineto::CpuTraceBuffer> buffer_;
};

class NeuronActivityProfiler : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override {
    return name_;
  }
  const std::set<libkineto::ActivityType>& availableActivities() const override {
    return activities_;
  }
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      const std::set<libkineto::ActivityType>& activity_types,
      const libkineto::Config& config) override {
    if (g_build == nullptr || activity_types.count(libkineto::ActivityType::CONCURRENT_KERNEL) == 0) {
      return nullptr; // a CPU-only profile: nothing recorded, nothing paid
    }
    return std::make_unique<Session>(config.getCustomConfig());
  }
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      int64_t /*ts_ms*/,
      int64_t /*duration_ms*/,
      const std::set<libkineto::ActivityType>& activity_types,
      const libkineto::Config& config) override {
    return configure(activity_types, config);
  }

 private:
  std::string name_{"neuron"};
  std::set<libkineto::ActivityType> activities_{
      libkineto::ActivityType::CONCURRENT_KERNEL, libkineto::ActivityType::PRIVATEUSE1_RUNTIME};
};

} // namespace

void note_device_work(DeviceWork kind, uint64_t payload, int64_t issue_ns) {
  if (!device_trace_recording()) {
    return;
  }
  CorrelationStack* stack = correlation_stack();
  const uint64_t correlation = stack != nullptr && !stack->ids.empty() ? stack->ids.back() : 0;
  const auto device = static_cast<int8_t>(current_device());
  const Note note{payload, correlation, issue_ns != 0 ? issue_ns : c10::getTime(),
                  libkineto::systemThreadId(), device, static_cast<uint8_t>(kind)};
  std::lock_guard<std::mutex> lock(g_mutex);
  if (device < 0 || static_cast<size_t>(device) >= g_notes.size() || device >= 64 ||
      (g_capture_mask & (uint64_t{1} << device)) == 0) {
    return;
  }
  auto& core = g_notes[static_cast<size_t>(device)];
  if (g_limit > 0 && core.size() >= g_limit) {
    core.pop_front(); // the runtime's rule: the oldest events are overwritten
  }
  core.push_back(note);
}

void install_device_trace(py::object on_start, py::object build) {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_build == nullptr) {
      g_on_start = new py::object();
      g_build = new py::object();
    }
    *g_on_start = std::move(on_start);
    *g_build = std::move(build);
  }
  static const bool registered = [] {
    torch::profiler::impl::PrivateUse1ProfilerRegistry::instance().registerFactory(
        [] { return std::unique_ptr<libkineto::IActivityProfiler>(new NeuronActivityProfiler()); });
    return true;
  }();
  (void)registered;
}

} // namespace torch_neuronx
