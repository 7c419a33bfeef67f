// One core's emulated device addresses (AddressRanges, AllocatorPools.h):
// segments are placed first fit on 2 MiB boundaries, as device pages are,
// and a released segment's addresses are merged with free neighbours for
// reuse, so a long run's addresses stay within the core's range.
#include "runtime/AllocatorPools.h"

#include <c10/util/Exception.h>

#include <iterator>

namespace torch_neuronx {
namespace {

constexpr uint64_t kSegmentAlignment = uint64_t{2} << 20;

} // namespace

AddressRanges::AddressRanges(uint64_t start, uint64_t bytes) {
  free_.emplace(start, bytes);
}

uint64_t AddressRanges::take(size_t bytes) {
  const uint64_t span = (bytes + kSegmentAlignment - 1) / kSegmentAlignment * kSegmentAlignment;
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second >= span) {
      const uint64_t start = it->first;
      if (it->second > span) {
        free_.emplace(start + span, it->second - span);
      }
      free_.erase(it);
      return start;
    }
  }
  TORCH_CHECK(false, "the neuron emulator ran out of device addresses on one core");
}

void AddressRanges::give_back(uint64_t address, size_t bytes) {
  uint64_t span = (bytes + kSegmentAlignment - 1) / kSegmentAlignment * kSegmentAlignment;
  auto next = free_.lower_bound(address);
  if (next != free_.end() && address + span == next->first) {
    span += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == address) {
      prev->second += span;
      return;
    }
  }
  free_.emplace(address, span);
}

} // namespace torch_neuronx
