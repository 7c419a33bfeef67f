// Shared state of the emulated Neuron runtime.
//
// The device is emulated on the host: "device memory" is host RAM, accounted
// per logical NeuronCore against the HBM capacity of the chosen instance
// profile (the profile itself is chosen in Python, see runtime/profiles.py).
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Device.h>
#include <c10/util/FunctionRef.h>

#include <cstdint>
#include <string>
#include <vector>

namespace torch_neuronx {

constexpr c10::DeviceType kNeuron = c10::DeviceType::PrivateUse1;

inline bool is_neuron(const at::Tensor& t) {
  return t.defined() && t.device().type() == kNeuron;
}

// ---- device topology (NeuronRuntime.cpp) ----------------------------------
// Configured once from Python at import: how many logical cores this process
// sees and how many bytes of HBM each one has.
void configure_devices(int64_t count, int64_t capacity_bytes);
void set_device_count(int64_t count); // called by configure_devices
c10::DeviceIndex device_count() noexcept;
c10::DeviceIndex current_device();
void set_current_device(c10::DeviceIndex index);
// Also the default of threads that never called set_device (torchrun ranks
// set LOCAL_RANK here, as the real runtime does).
void set_default_device(c10::DeviceIndex index);
void check_device_index(c10::DeviceIndex index);
// Set once the runtime has done work (first allocation); mirrors
// `torch.neuron.is_initialized()`.
bool runtime_initialized();
void mark_runtime_initialized();
// A message raised on the first device use (empty = none). The distributed
// layer sets it under torchrun until `init_process_group("neuron")` runs, as
// the real runtime refuses to start before the process group exists.
void set_init_error(std::string message);

// ---- allocator (NeuronAllocator.cpp) ---------------------------------------
c10::DeviceAllocator* allocator();
int64_t device_capacity(c10::DeviceIndex index);
// Wrap memory that a CPU kernel allocated as neuron memory of `index`,
// charging it against that core's capacity (raises OutOfMemoryError).
c10::DataPtr adopt_cpu_storage(
    const c10::Storage& cpu_storage,
    c10::DeviceIndex index);

// ---- host memory pool (NeuronHostPool.cpp) ---------------------------------
// While one exists on a thread, large CPU allocations (the outputs of the CPU
// kernel running a neuron op) come from the pool of device host memory.
class HostPoolScope {
 public:
  HostPoolScope();
  ~HostPoolScope();
  HostPoolScope(const HostPoolScope&) = delete;
  HostPoolScope& operator=(const HostPoolScope&) = delete;
};
// Installs the pool behind the process's CPU allocator; keeps at most
// `limit_bytes` of freed blocks (TORCHNEURON_HOST_POOL_MB).
void install_host_pool(int64_t limit_bytes);
void* host_pool_allocate(size_t nbytes);
void host_pool_free(void* data, size_t nbytes);
void empty_host_pool();
// hits, misses, cached bytes, limit bytes
std::vector<int64_t> host_pool_stats();

// ---- zero-copy CPU aliases (NeuronAlias.cpp) -------------------------------
// A CPU tensor over the same bytes as the neuron tensor `t`; keeps `t`'s
// storage alive. Used by the fallback, the process group and compiled graphs.
at::Tensor cpu_alias(const at::Tensor& t);
// The inverse: a neuron tensor taking ownership of a CPU tensor's storage.
at::Tensor adopt_cpu_tensor(const at::Tensor& cpu, c10::DeviceIndex index);

// ---- generators (NeuronHooks.cpp) ------------------------------------------
const at::Generator& default_generator(c10::DeviceIndex index);

// ---- eager routing (NeuronFallback.cpp) ------------------------------------
// Sends structured ops straight to the fallback; returns how many were routed.
int64_t route_structured_ops_to_fallback();
// The ops with an unboxed fast-path kernel (NeuronFastPath.cpp).
std::vector<std::string> fast_path_ops();

// ---- attention (NeuronAttention.cpp) ---------------------------------------
// TORCH_NEURONX_ENABLE_NKI_SDPA: SDPA runs as one fused flash kernel when the
// inputs allow it (true), or always as the math decomposition (false).
void set_fused_attention(bool enabled);

// ---- fidelity hooks used by the fallback (NeuronFidelity.cpp) -------------
// Called once per executed kernel when accounting is on, with the boxed
// arguments on top of the stack ...
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
bool accounting_enabled();
// 64-bit value semantics: 0 = off, 1 = narrow (warn once), 2 = strict (raise).
int narrowing_mode();
// Narrows int64/float64 values in place (on a CPU alias of device memory).
void narrow_64bit_inplace(const at::Tensor& cpu_view_of_device_memory);

} // namespace torch_neuronx
