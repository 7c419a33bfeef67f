// The device side of a compiled graph's calls (GraphInputs.cpp): CPU aliases
// of its inputs, kept from call to call, and the mapping of its results.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/intrusive_ptr.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

namespace torch_neuronx {

// One call of a compiled graph: holds its neuron inputs until the results
// are mapped (the aliases it ran on do not own the memory they view).
class GraphCall {
 public:
  explicit GraphCall(std::shared_ptr<const std::vector<std::optional<c10::Device>>> devices)
      : devices_(std::move(devices)) {}

  // Output `i` of the CPU code, on the device the graph promised for it: a
  // view of the neuron input (or earlier result) whose memory it shares, the
  // CPU memory adopted as neuron memory, or for a CPU output, never an alias
  // of device memory.
  at::Tensor result(size_t i, const at::Tensor& out);
  size_t outputs() const {
    return devices_->size();
  }

 private:
  friend class GraphInputs;
  const at::Tensor* base_of(const at::Tensor& out) const;

  std::shared_ptr<const std::vector<std::optional<c10::Device>>> devices_;
  std::vector<at::Tensor> inputs_;   // neuron inputs with memory
  std::vector<at::Tensor> adopted_;  // results adopted so far
};

// Per compiled graph: the CPU alias of each input position. Parameters and
// a static KV cache are the same tensors on every call, so their aliases are
// built once; an alias is rebuilt when its position holds other memory or
// another layout. A cached alias holds only a weak reference to the neuron
// storage, so the cache never keeps device memory alive.
class GraphInputs {
 public:
  // `devices`: per graph output, its device (nullopt: not a tensor).
  explicit GraphInputs(std::vector<std::optional<c10::Device>> devices);

  // CPU tensors for the graph's tensor inputs (undefined ones stay
  // undefined, non-neuron ones pass through); `call` keeps the neuron inputs
  // alive until it is destroyed.
  std::vector<at::Tensor> alias(const std::vector<at::Tensor>& inputs, GraphCall& call);
  std::shared_ptr<GraphCall> new_call() const {
    return std::make_shared<GraphCall>(devices_);
  }

 private:
  struct Slot {
    std::optional<c10::weak_intrusive_ptr<c10::StorageImpl>> storage;
    at::Tensor alias;
  };
  std::shared_ptr<const std::vector<std::optional<c10::Device>>> devices_;
  std::mutex mutex_;
  std::vector<Slot> slots_;
};

// Input aliases built and reused by every GraphInputs since the last reset.
std::pair<uint64_t, uint64_t> graph_input_alias_counts(bool reset);

} // namespace torch_neuronx
