// The generator a random op draws from on neuron, held for one call.
//
// CPU kernels accept only CPU generators, and neuron generators are CPU
// (mt19937) generators tagged with the device (runtime/Generators.h). For
// one call the lease locks a neuron generator and lends its state to a CPU
// generator the kernel can use, then takes the advanced state back:
//   * lend():   an op with a generator argument gets a per-thread scratch CPU
//               generator holding the neuron generator's state;
//   * borrow_default_cpu(): an op that draws from the CPU default generator
//               inside its kernel (native_dropout, flash attention's
//               dropout) runs with that generator holding the core's state,
//               so dropout follows torch.neuron.manual_seed and leaves the
//               CPU stream alone.
// Used by the boxed fallback; any unboxed kernel of a random op would take
// the same lease.
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
  void borrow_default_cpu(const at::Generator& neuron);

 private:
  at::Generator neuron_;
  std::unique_lock<std::mutex> lock_;
  bool lent_ = false;
  bool borrowed_default_ = false;
};

} // namespace torch_neuronx
