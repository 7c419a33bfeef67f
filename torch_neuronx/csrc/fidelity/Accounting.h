// Per-signature kernel accounting (Accounting.cpp): what Trainium would
// compile. Called once per executed kernel by the fallback and the fast path
// when accounting is on.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/util/FunctionRef.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <vector>

namespace torch_neuronx {

bool accounting_enabled();
// `salt`: the compiler configuration (target, LNC, opt level, flags).
void set_accounting(bool enabled, uint64_t salt);
// Python callable run for each signature new to this process (None: none).
void set_signature_callback(pybind11::object fn);

// From the boxed fallback, with the arguments on top of the stack ...
void account_kernel(const c10::OperatorHandle& op, const torch::jit::Stack& args);
// ... or, from unboxed kernels, with the arguments already hashed: start from
// kSignatureSeed and mix each argument as the boxed path would (a tensor with
// mix_signature_tensor, an int list element by element with
// mix_signature_int, anything else as an IValue), so both paths give one
// signature. `describe_call` runs only for a signature not seen before.
constexpr uint64_t kSignatureSeed = 0x51ed270b;
void mix_signature_int(uint64_t& h, int64_t v);
void mix_signature_tensor(uint64_t& h, const at::Tensor& t);
void mix_signature_value(uint64_t& h, const c10::IValue& v);
void account_signature(
    const c10::OperatorHandle& op,
    uint64_t args_hash,
    c10::function_ref<std::string()> describe_call);
// The text of a signature, as the persistent cache records it.
std::string describe_signature(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args);

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
// Zero every counter and forget seen signatures.
void reset_accounting();
// Forget which signatures were seen (counters stay): each one reaches the
// callback again, which is how op tracking is re-armed after a clear.
void forget_signatures();

} // namespace torch_neuronx
