// Per-core random generators.
//
// The state is the real product's: 16 bytes, seed then offset, each a
// little-endian uint64 (TR csrc/core/NeuronHooksInterface.cpp:22-126;
// get_rng_state has length 16). As in the April source, random ops draw from
// the CPU default generator by default and only an explicitly passed neuron
// generator is drawn from. With TORCHNEURON_RNG=counter every random op on
// neuron draws from its core's generator (aten/native/CounterRandom.cpp),
// counter-based: the values of a draw are a function of (seed, offset +
// element index) only, with no hidden stream position. That is what DTensor's
// RNG tracker (torch/distributed/tensor/_random.py) relies on: it reads the
// state as Philox (seed, offset), places each shard's draw by setting the
// offset, and moves every rank's offset past the whole tensor afterwards.
// With the CPU stream, each DTensor random op starts from the same CPU state,
// since the tracker's fork_rng restores it after the op (docs/device.md).
#include "runtime/Generators.h"

#include <atomic>

#include "runtime/Device.h"
#include "runtime/Fork.h"

#include <ATen/ops/empty.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/irange.h>

#include <cstring>
#include <deque>
#include <mutex>

namespace torch_neuronx {

NeuronGenerator::NeuronGenerator(c10::DeviceIndex index, uint64_t seed)
    : c10::GeneratorImpl(c10::Device(kNeuron, index),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      seed_(seed) {}

void NeuronGenerator::set_current_seed(uint64_t seed) {
  seed_ = seed;
  offset_ = 0;
}

uint64_t NeuronGenerator::current_seed() const {
  return seed_;
}

uint64_t NeuronGenerator::seed() {
  const uint64_t fresh = c10::detail::getNonDeterministicRandom();
  set_current_seed(fresh);
  return fresh;
}

void NeuronGenerator::set_offset(uint64_t offset) {
  offset_ = offset;
}

uint64_t NeuronGenerator::get_offset() const {
  return offset_;
}

static constexpr size_t kStateBytes = 2 * sizeof(uint64_t);

void NeuronGenerator::set_state(const c10::TensorImpl& new_state) {
  TORCH_CHECK(new_state.dtype() == caffe2::TypeMeta::Make<uint8_t>() &&
                  new_state.device().is_cpu() && new_state.numel() == static_cast<int64_t>(kStateBytes),
              "A neuron generator's state is 16 bytes (seed and offset, each a little-endian uint64) "
              "in a CPU uint8 tensor, as get_rng_state() returns it; got ",
              new_state.numel(), " elements of ", new_state.dtype().name(), " on ", new_state.device());
  const auto* bytes = static_cast<const uint8_t*>(new_state.data());
  std::memcpy(&seed_, bytes, sizeof(uint64_t));
  std::memcpy(&offset_, bytes + sizeof(uint64_t), sizeof(uint64_t));
}

c10::intrusive_ptr<c10::TensorImpl> NeuronGenerator::get_state() const {
  at::Tensor state = at::empty({static_cast<int64_t>(kStateBytes)}, at::kByte);
  auto* bytes = state.mutable_data_ptr<uint8_t>();
  std::memcpy(bytes, &seed_, sizeof(uint64_t));
  std::memcpy(bytes + sizeof(uint64_t), &offset_, sizeof(uint64_t));
  return state.getIntrusivePtr();
}

CounterDraw NeuronGenerator::claim(int64_t numel) {
  CounterDraw draw{seed_, offset_, std::move(shard_index_)};
  shard_index_ = at::Tensor();
  if (draw.index.defined() && draw.index.numel() == numel) {
    return draw; // DTensor's tracker sets the offset past the whole tensor after the op
  }
  // No shard index, or one for another shape (an op inside DTensor's region
  // that draws a different number of values): a plain draw.
  draw.index = at::Tensor();
  offset_ += round_up_4(static_cast<uint64_t>(numel));
  return draw;
}

void NeuronGenerator::set_shard_index(at::Tensor index) {
  TORCH_CHECK(!index.defined() || (index.scalar_type() == at::kLong && index.device().is_cpu()),
              "neuron generator: a shard index is a CPU int64 tensor");
  shard_index_ = index.defined() ? index.contiguous() : index;
}

NeuronGenerator* NeuronGenerator::clone_impl() const {
  auto* copy = new NeuronGenerator(device_.index(), seed_);
  copy->offset_ = offset_;
  return copy;
}

namespace {

std::atomic<bool> g_counter_draws{false};

} // namespace

void set_counter_draws(bool on) {
  g_counter_draws.store(on, std::memory_order_relaxed);
}

bool counter_draws() {
  return g_counter_draws.load(std::memory_order_relaxed);
}

namespace {

std::mutex g_generators_mutex;
std::deque<at::Generator> g_default_generators; // stable addresses

// In a forked child (Fork.h): fresh locks, including each default
// generator's own, which a random op on another thread may have held. The
// states stay: the child continues the parent's streams, as on CPU.
void generators_after_fork() {
  recreate_lock(g_generators_mutex);
  for (auto& gen : g_default_generators) {
    recreate_lock(gen.mutex());
  }
}
const bool g_generators_fork_handler = on_fork_child(&generators_after_fork);

} // namespace

const at::Generator& default_generator(c10::DeviceIndex index) {
  const auto device = index < 0 ? current_device() : index;
  check_device_index(device);
  std::lock_guard<std::mutex> lock(g_generators_mutex);
  while (static_cast<c10::DeviceIndex>(g_default_generators.size()) <= device) {
    g_default_generators.push_back(at::make_generator<NeuronGenerator>(
        static_cast<c10::DeviceIndex>(g_default_generators.size()), c10::default_rng_seed_val));
  }
  return g_default_generators[device];
}

at::Generator neuron_generator_for(
    const std::optional<at::Generator>& explicit_gen, c10::DeviceIndex device) {
  if (explicit_gen.has_value() && explicit_gen->defined()) {
    TORCH_CHECK(explicit_gen->device().type() == kNeuron,
                "a random op on neuron takes a neuron generator (torch.Generator(device='neuron')); got "
                "one on ", explicit_gen->device());
    return *explicit_gen;
  }
  return default_generator(device);
}

} // namespace torch_neuronx
