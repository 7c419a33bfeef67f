// The autograd engine runs the backward of `neuron` tensors on one worker thread
// per device index (`pt_autograd_<index>`). The worker tells the caller of
// backward() that a graph task is done and only then drops its own reference to
// it, and a graph task holds Python objects: PyTorch stashes the caller's
// contextvars context in the thread-local state every task captures, and a task
// that failed holds the Python error. When a script exits right after a
// backward, the worker can drop the last reference while Python finalizes;
// taking the GIL then ends the thread with pthread_exit, whose unwind through a
// noexcept destructor aborts the process ("terminate called without an active
// exception", exit code 134 instead of the script's own). The exit handler
// (torch_neuronx/neuron/autograd_workers.py) settles the workers first.
#include "runtime/AutogradWorkers.h"

#include "accounting/Accounting.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/zeros.h>
#include <torch/csrc/autograd/autograd.h>

#include <exception>
#include <thread>

namespace torch_neuronx {

void settle_autograd_workers(const std::vector<c10::DeviceIndex>& devices) {
  // A one-node backward per device, queued behind whatever that device's worker
  // holds: the worker runs its tasks in order, so when this backward returns the
  // worker has dropped every earlier one. It runs on a new thread, whose empty
  // thread-local state (no stashed context, no Python modes) the task captures,
  // and its tensors never reach Python: whichever thread drops this task last
  // frees nothing that needs the GIL. Not accounted: these are not the user's kernels.
  const bool accounting = accounting_enabled();
  const uint64_t salt = accounting_salt();
  set_accounting(false, salt);
  std::exception_ptr failure;
  std::thread settle([&] {
    try {
      for (const c10::DeviceIndex index : devices) {
        const auto leaf = at::zeros({}, at::TensorOptions().device(c10::DeviceType::PrivateUse1, index))
                              .requires_grad_(true);
        torch::autograd::backward({leaf.mul(2)});
      }
    } catch (...) {
      failure = std::current_exception();
    }
  });
  settle.join();
  set_accounting(accounting, salt);
  if (failure) {
    std::rethrow_exception(failure);
  }
}

} // namespace torch_neuronx
