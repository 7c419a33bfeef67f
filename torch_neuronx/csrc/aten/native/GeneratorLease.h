// An explicit neuron generator, lent to a CPU kernel for one call.
//
// Random ops on neuron draw from the CPU default generator, as on the real
// product (randn/rand/normal_/bernoulli_ and dropout fall back to CPU and consume
// the CPU stream: TR tests/device/test_rng_state.py:85-104,
// python_ops/torch_mlir/ops/dropout.py:30-34): a call without a generator runs its CPU
// kernel unchanged. A generator the caller passes explicitly
// (torch.Generator(device="neuron")) is honoured: CPU kernels accept only
// CPU generators, so the lease locks the neuron generator (a CPU mt19937
// generator tagged with the device, runtime/Generators.h), lends its state
// to a per-thread CPU generator for the call, and takes the advanced state
// back. Used by the boxed fallback; any unboxed kernel of a random op would
// take the same lease.
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>

#include <mutex>

namespace torch_neuronx {

class GeneratorLease {
 public:
  GeneratorLease() = default;
  ~GeneratorLease();
  GeneratorLease(const GeneratorLease&) = delete;
  GeneratorLease& operator=(const GeneratorLease&) = delete;

  // The CPU generator to pass to the kernel in place of `neuron`.
  const at::Generator& lend(const at::Generator& neuron);

 private:
  at::Generator neuron_;
  std::unique_lock<std::mutex> lock_;
};

} // namespace torch_neuronx
