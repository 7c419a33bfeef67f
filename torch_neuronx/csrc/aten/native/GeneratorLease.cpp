// Lending an explicit neuron generator's state to a CPU kernel (see
// GeneratorLease.h).
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
  return scratch_generator();
}

GeneratorLease::~GeneratorLease() {
  if (neuron_.defined()) {
    copy_generator_state(*scratch_generator().get<at::CPUGeneratorImpl>(),
                         *neuron_.get<at::CPUGeneratorImpl>());
  }
}

} // namespace torch_neuronx
