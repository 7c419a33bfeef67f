// Per-core random generators: counter-based, with the real product's 16-byte
// state (seed, offset), so that DTensor's RNG tracker can place each shard's
// draws (Generators.cpp says how values follow from the state).
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/GeneratorImpl.h>

#include <cstdint>

namespace torch_neuronx {

// Where one random op's values come from: element k of the op's output (in
// the output's row-major order) is derived from the counter
// `offset + (index ? index[k] : k)` of the stream keyed by `seed`.
struct CounterDraw {
  uint64_t seed;
  uint64_t offset;
  at::Tensor index; // int64, one entry per element, or undefined
};

// The 128 random bits of block `counter` of the stream keyed by `seed`:
// Philox-4x32-10 (Salmon et al., SC'11), the generator CUDA's and DTensor's
// (seed, offset) state describes; the same rounds as ATen's philox_engine,
// written here so the loops that call it per block can inline it.
struct CounterBits {
  uint32_t w[4];
};
inline CounterBits counter_bits(uint64_t seed, uint64_t counter) {
  uint32_t c[4] = {static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32), 0, 0};
  uint32_t k[2] = {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k[0] += 0x9E3779B9u;
      k[1] += 0xBB67AE85u;
    }
    const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c[0];
    const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c[2];
    const uint32_t next[4] = {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<uint32_t>(p1),
                              static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<uint32_t>(p0)};
    c[0] = next[0], c[1] = next[1], c[2] = next[2], c[3] = next[3];
  }
  return CounterBits{{c[0], c[1], c[2], c[3]}};
}

class NeuronGenerator final : public c10::GeneratorImpl {
 public:
  explicit NeuronGenerator(c10::DeviceIndex index, uint64_t seed);

  void set_current_seed(uint64_t seed) override;
  uint64_t current_seed() const override;
  uint64_t seed() override;
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;

  // The next draw of `numel` values; advances the offset past them (rounded
  // up to a multiple of 4, as DTensor's tracker advances it). The caller holds
  // mutex_. A shard index set for this draw is used once, if it has one entry
  // per value drawn.
  CounterDraw claim(int64_t numel);
  // Each element's index in the whole tensor, for the next draw (DTensor).
  void set_shard_index(at::Tensor index);
  // Inside DTensor's RNG region for a draw (a shard index is set).
  bool drawing_a_shard() const {
    return shard_index_.defined();
  }

 private:
  NeuronGenerator* clone_impl() const override;

  uint64_t seed_;
  uint64_t offset_ = 0;
  at::Tensor shard_index_;
};

const at::Generator& default_generator(c10::DeviceIndex index);

// The generator a random op on `device` draws from: `explicit_gen` when the
// caller passed one, else the core's default generator.
at::Generator neuron_generator_for(
    const std::optional<at::Generator>& explicit_gen, c10::DeviceIndex device);

// Which generator a random op on neuron draws from when no neuron generator is
// passed (TORCHNEURON_RNG): false, the CPU default generator, as the real
// product does (its random ops fall back to the CPU); true, the core's
// counter-based generator, so that DTensor's sharded draws equal the
// unsharded draw. An explicitly passed neuron generator, and a draw inside
// DTensor's RNG region, always draw from it: the region restores the CPU
// state after each op, so CPU draws there would repeat (rejection sampling,
// as nn.init.trunc_normal_ does, would never end).
void set_counter_draws(bool on);
bool counter_draws();

// Offsets advance by whole groups of four counters (DTensor's tracker rounds
// a tensor's size up to a multiple of 4 when it moves the offset past it).
inline uint64_t round_up_4(uint64_t n) {
  return (n + 3) / 4 * 4;
}

} // namespace torch_neuronx
