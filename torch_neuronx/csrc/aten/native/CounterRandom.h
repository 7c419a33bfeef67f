// Random ops whose values the neuron generator gives element by element
// (CounterRandom.cpp): uniform_, normal_, bernoulli_, random_, exponential_,
// log_normal_, cauchy_, geometric_, the functional normal overloads and
// native_dropout. Run by the CPU fallback in place of the op's CPU kernel,
// on the same CPU aliases.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace torch_neuronx::native {

// Runs `op` drawing from `gen` when its values are drawn element by element:
// pops its arguments (from `begin`; neuron tensors already replaced by CPU
// aliases), pushes its results and returns true. False (nothing done) for any
// other op, complex outputs and dropout that draws nothing (evaluation).
bool run_counter_random(const c10::OperatorHandle& op, torch::jit::Stack& stack, size_t begin,
                        const at::Generator& gen);

// native_dropout draws without a generator argument in its schema.
bool is_native_dropout(const c10::OperatorHandle& op);

} // namespace torch_neuronx::native
