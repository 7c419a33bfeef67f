// 64-bit value semantics (Narrowing.cpp): Trainium stores int64 as int32 and
// float64 as float32.
#pragma once

#include <ATen/core/Tensor.h>

namespace torch_neuronx {

// 0 = off, 1 = narrow (warn once), 2 = strict (raise); 0 on a thread that
// suspended narrowing (printing).
int narrowing_mode();
int configured_narrowing_mode();
void set_narrowing_mode(int mode);
void suspend_narrowing(bool suspend);
// Narrows int64/float64 values in place (on a CPU alias of device memory).
void narrow_64bit_inplace(const at::Tensor& cpu_view_of_device_memory);
// Whether a contiguous int64/float64 tensor's values (on any device: read in
// place, no kernel) all stay the same in 32 bits. A fresh result that fits
// needs no CPU alias to narrow it; false for a strided one (not scanned).
bool fits_in_32_bits(const at::Tensor& t);

} // namespace torch_neuronx
