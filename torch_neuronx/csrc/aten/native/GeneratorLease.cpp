// Lending a neuron generator to a CPU kernel (see GeneratorLease.h).
#include "aten/native/GeneratorLease.h"

#include "runtime/Generators.h"

#include <ATen/CPUGeneratorImpl.h>

namespace torch_neuronx {
namespace {

// A CPU generator per thread, reseeded for each call: constructing one (a
// Mersenne Twister state) per call would cost more than reseeding it.
at::Generator& scratch_generator() {
  thread_local at::Generator gen = at::make_generator<at::CPUGeneratorImpl>();
  return gen;
}

// SplitMix64's finaliser: nearby (seed, offset) pairs give unrelated seeds.
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

} // namespace

const at::Generator& GeneratorLease::lend(const at::Generator& neuron) {
  neuron_ = neuron;
  lock_ = std::unique_lock<std::mutex>(neuron_.mutex());
  const auto* impl = neuron_.get<NeuronGenerator>();
  scratch_generator().set_current_seed(mix(impl->current_seed() ^ mix(impl->get_offset())));
  return scratch_generator();
}

void GeneratorLease::finish(int64_t drawn) {
  auto* impl = neuron_.get<NeuronGenerator>();
  impl->set_offset(impl->get_offset() + round_up_4(static_cast<uint64_t>(std::max<int64_t>(drawn, 1))));
}

} // namespace torch_neuronx
