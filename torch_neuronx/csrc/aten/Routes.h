// What the route tables in this folder registered, for bindings, tests and
// docs (each table is one file, named <route>Routes.cpp: Native, FastPath,
// CpuFallback, Attention, Autocast, MemoryFormat).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace torch_neuronx {

// Ops with an unboxed fast-path kernel (FastPathRoutes.cpp).
std::vector<std::string> fast_path_ops();
// Ops sent to the CPU kernel instead of PyTorch's decomposition (CpuFallbackRoutes.cpp).
const std::vector<std::string>& bit_exact_ops();
// Native kernels that account the kernels of the composite they replace
// (NativeRoutes.cpp): the projection's trace follows their composite.
std::vector<std::string> ops_accounted_as_composite();
// Native kernels accounted as one kernel of their own (ScaledMatmulRoutes.cpp):
// the projection's trace counts them as the fallback's.
std::vector<std::string> accounted_native_ops();
// Sends structured ops and the single-kernel foreach ops straight to the
// fallback; returns the names it routed ("aten::atan2", "aten::_foreach_add.List").
// Idempotent: the first call (at module init) does the work.
const std::vector<std::string>& route_ops_to_fallback();

} // namespace torch_neuronx
