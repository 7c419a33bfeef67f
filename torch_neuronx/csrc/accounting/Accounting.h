// Per-signature kernel accounting (Accounting.cpp): what Trainium would
// compile. Called once per executed kernel by the fallback and the fast path
// when accounting is on; the key itself is built by KernelKey.h.
#pragma once

#include "accounting/KernelKey.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/util/FunctionRef.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace torch_neuronx {

namespace detail {
extern std::atomic<bool> g_accounting_enabled; // set_accounting's
} // namespace detail
// Inline: every fast-path call asks, and an out-of-line call was a cold
// instruction-cache line of its own per op.
inline bool accounting_enabled() {
  return detail::g_accounting_enabled.load(std::memory_order_relaxed);
}
// `salt`: the compiler configuration (target, LNC, opt level, flags).
void set_accounting(bool enabled, uint64_t salt);
uint64_t accounting_salt();
// set_signature_callback(), the Python callback for new signatures, is
// declared in Module.cpp: this header stays free of pybind11 for the fallback
// and the fast path that include it.

// One kernel of signature (op, `args_hash`) ran; the op by its schema, which
// the fast path holds (an OperatorHandle's schema() is an out-of-line call).
// `box_args` gives the call's arguments; it runs only for a new signature.
void account_signature(
    const c10::FunctionSchema& schema,
    uint64_t args_hash,
    c10::function_ref<std::vector<c10::IValue>()> box_args);
// The contiguity kernel the real product runs first for each strided input.
void account_contiguity_kernels(const KeyBuilder& key);

// One call keyed into `key`. A call with an empty tensor runs no kernel and
// is not counted; each strided input first counts the contiguity kernel.
// Inline: the fast path accounts every call.
inline void account_call(
    const c10::FunctionSchema& schema,
    const KeyBuilder& key,
    c10::function_ref<std::vector<c10::IValue>()> box_args) {
  if (C10_UNLIKELY(!key.plain())) {
    if (key.has_empty_tensor()) {
      return;
    }
    account_contiguity_kernels(key);
  }
  account_signature(schema, key.hash(), box_args);
}
// The boxed form: the arguments are on top of the stack.
void account_kernel(const c10::OperatorHandle& op, const torch::jit::Stack& stack);
// The hex key the boxed fallback gives this call (the key new signatures are
// reported and counted under), under the current compiler salt.
std::string signature_key(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args);

struct OpAccount {
  std::string name;
  uint64_t calls;
  uint64_t signatures;
};
struct AccountingStats {
  uint64_t calls;
  uint64_t repeats;
  uint64_t signatures;
  std::vector<OpAccount> ops; // ops called since the last reset
};
AccountingStats accounting_stats();
// Calls per signature key (hex) since the last reset, for signatures called
// at least once.
std::vector<std::pair<std::string, uint64_t>> signature_calls();
// Zero every counter and forget seen signatures.
void reset_accounting();
// Forget which signatures were seen (counters stay): each one reaches the
// callback again, which is how op tracking is re-armed after a clear.
void forget_signatures();

} // namespace torch_neuronx
