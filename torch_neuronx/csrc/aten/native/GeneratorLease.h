// A neuron generator lent to a CPU kernel for one call.
//
// Random ops on neuron draw from the neuron generator (runtime/Generators.h).
// Those whose values it gives element by element run in CounterRandom.cpp;
// any other op with a generator argument (multinomial, randperm, poisson,
// rrelu, ...) runs its CPU kernel, which accepts only CPU generators. The
// lease locks the neuron generator, lends the kernel a per-thread CPU
// generator seeded from the neuron generator's (seed, offset), and moves the
// neuron generator past what the op drew: the op's values are reproducible
// under torch.manual_seed and differ from one call to the next, as any draw.
#pragma once

#include <ATen/core/Generator.h>

#include <cstdint>
#include <mutex>

namespace torch_neuronx {

class GeneratorLease {
 public:
  GeneratorLease() = default;
  GeneratorLease(const GeneratorLease&) = delete;
  GeneratorLease& operator=(const GeneratorLease&) = delete;

  // The CPU generator to pass to the kernel in place of `neuron`.
  const at::Generator& lend(const at::Generator& neuron);
  // After the kernel: the neuron generator moves past `drawn` values.
  void finish(int64_t drawn);

 private:
  at::Generator neuron_;
  std::unique_lock<std::mutex> lock_;
};

} // namespace torch_neuronx
