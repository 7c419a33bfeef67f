// The pool of host memory behind neuron tensors (HostPool.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace torch_neuronx {

// While one exists on a thread, CPU allocations of 1 KiB and more (the outputs of the CPU
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

} // namespace torch_neuronx
