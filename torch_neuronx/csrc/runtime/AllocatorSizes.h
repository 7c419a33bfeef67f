// The caching allocator's sizes: which pool a request goes to, the block it
// gets and the segment a new block opens (AllocatorPools.cpp uses them).
//
// From the real product's documentation (Neuron "Guidelines for memory
// management", torch-neuronx 2.14, 2026-10-08): requests under 1 MB go to the
// small pool, the others to the large pool; requests under 16 MB are rounded
// up to a size class, at least 256 bytes; requests of 16 MB and more are not
// rounded. The page does not give the spacing of the classes nor the segment
// sizes, so those follow PyTorch's CUDA caching allocator, which the page's
// design (segments, two pools split at 1 MB, `empty_cache`) mirrors:
// - classes 256 bytes apart up to 1 KiB, then four per doubling (a request
//   in (2^k, 2^(k+1)] is rounded up to a multiple of 2^(k-2)), so a block
//   is at most a quarter larger than its request (CUDA's
//   `roundup_power2_divisions` of 4);
// - small-pool segments of 2 MiB; a large request rounded below 10 MiB
//   shares a 20 MiB segment; a larger one gets a segment of its own size.
#pragma once

#include <cstddef>
#include <cstdint>

namespace torch_neuronx {

constexpr size_t kMinBlockBytes = 256;
constexpr size_t kSmallRequestLimit = size_t{1} << 20;
constexpr size_t kRoundingLimit = size_t{16} << 20;
constexpr size_t kSmallSegmentBytes = size_t{2} << 20;
constexpr size_t kLargeSegmentBytes = size_t{20} << 20;
constexpr size_t kSharedSegmentLimit = size_t{10} << 20;

constexpr bool is_small_request(size_t bytes) {
  return bytes < kSmallRequestLimit;
}

// The bytes of the block a request of `bytes` (> 0) gets.
constexpr size_t block_bytes(size_t bytes) {
  if (bytes >= kRoundingLimit) {
    return bytes;
  }
  if (bytes <= kMinBlockBytes) {
    return kMinBlockBytes;
  }
  const int k = 63 - __builtin_clzll(bytes - 1); // 2^k < bytes <= 2^(k+1)
  const size_t quarter = size_t{1} << (k - 2);
  const size_t step = quarter > kMinBlockBytes ? quarter : kMinBlockBytes;
  return (bytes + step - 1) & ~(step - 1); // step is a power of two
}

// The bytes of the segment that a request of `bytes` opens when no cached
// block can hold it.
constexpr size_t segment_bytes(size_t bytes) {
  if (is_small_request(bytes)) {
    return kSmallSegmentBytes;
  }
  const size_t block = block_bytes(bytes);
  return block < kSharedSegmentLimit ? kLargeSegmentBytes : block;
}

static_assert(block_bytes(1) == 256 && block_bytes(257) == 512 && block_bytes(1025) == 1280);
static_assert(block_bytes((size_t{3} << 20) + 1) == (size_t{7} << 19));
static_assert(block_bytes(kRoundingLimit - 1) == kRoundingLimit);
static_assert(block_bytes(kRoundingLimit + 1) == kRoundingLimit + 1);

} // namespace torch_neuronx
