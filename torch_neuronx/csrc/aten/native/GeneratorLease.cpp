// Lending a neuron generator's state to CPU kernels (see GeneratorLease.h).
#include "aten/native/GeneratorLease.h"

namespace torch_neuronx {
namespace {

// A CPU generator per thread that holds a neuron generator's state for one
// call: constructing one (a Mersenne Twister state) per call would cost more
// than many kernels.
const at::Generator& scratch_generator() {
  thread_local at::Generator gen = at::make_generator<at::CPUGeneratorImpl>();
  return gen;
}

// Where the CPU default generator's own state waits during a borrow.
at::CPUGeneratorImpl& saved_default_state() {
  thread_local at::CPUGeneratorImpl saved;
  return saved;
}

at::CPUGeneratorImpl& cpu_default() {
  return *at::detail::getDefaultCPUGenerator().get<at::CPUGeneratorImpl>();
}

void copy_generator_state(at::CPUGeneratorImpl& from, at::CPUGeneratorImpl& to) {
  to.set_engine(from.engine());
  to.set_next_float_normal_sample(from.next_float_normal_sample());
  to.set_next_double_normal_sample(from.next_double_normal_sample());
}

} // namespace

const at::Generator& GeneratorLease::lend(const at::Generator& neuron) {
  neuron_ = neuron;
  lock_ = std::unique_lock<std::mutex>(neuron_.mutex());
  copy_generator_state(*neuron_.get<at::CPUGeneratorImpl>(),
                       *scratch_generator().get<at::CPUGeneratorImpl>());
  lent_ = true;
  return scratch_generator();
}

void GeneratorLease::borrow_default_cpu(const at::Generator& neuron) {
  neuron_ = neuron;
  lock_ = std::unique_lock<std::mutex>(neuron_.mutex());
  // The CPU generator's mutex cannot be held across the kernel, which locks
  // it itself.
  auto& cpu = cpu_default();
  std::lock_guard<std::mutex> cpu_lock(cpu.mutex_);
  copy_generator_state(cpu, saved_default_state());
  copy_generator_state(*neuron_.get<at::CPUGeneratorImpl>(), cpu);
  borrowed_default_ = true;
}

GeneratorLease::~GeneratorLease() {
  if (borrowed_default_) {
    auto& cpu = cpu_default();
    std::lock_guard<std::mutex> cpu_lock(cpu.mutex_);
    copy_generator_state(cpu, *neuron_.get<at::CPUGeneratorImpl>());
    copy_generator_state(saved_default_state(), cpu);
  }
  if (lent_) {
    copy_generator_state(*scratch_generator().get<at::CPUGeneratorImpl>(),
                         *neuron_.get<at::CPUGeneratorImpl>());
  }
}

} // namespace torch_neuronx
