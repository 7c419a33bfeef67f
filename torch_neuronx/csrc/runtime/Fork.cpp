// Forked children: what the real product does, and what the emulator keeps.
//
// The real product registers an os.register_at_fork hook (TR
// torch_neuronx/__init__.py:134-173; message at :149-154): a child forked after the
// runtime was initialised from Python (torch.neuron.init(),
// get_device_properties(), init_process_group("neuron")) is "in a bad fork",
// torch.neuron._is_in_bad_fork() is true (so torch.manual_seed skips the
// neuron generators) and initialising again raises "Cannot re-initialize
// Neuron runtime in forked subprocess. ...". Its C++ runtime flag is not
// reset, so the source does not refuse the child's tensors and ops.
//
// The emulated device is host memory, which fork() copies: the child's
// tensors stay valid and its ops compute as in the parent. What the child
// must not keep is state owned by threads fork() did not copy (locks) and
// counters that describe the parent's life: each component resets those in
// its own handler (Device.cpp, Allocator.cpp, HostPool.cpp, Hooks.cpp,
// accounting/Accounting.cpp, accounting/KernelKey.cpp).
#include "runtime/Fork.h"

#include <c10/util/Exception.h>

#include <pthread.h>

namespace torch_neuronx {

bool on_fork_child(void (*handler)()) {
  const int error = pthread_atfork(nullptr, nullptr, handler);
  TORCH_CHECK(error == 0, "pthread_atfork failed with error ", error);
  return true;
}

} // namespace torch_neuronx
