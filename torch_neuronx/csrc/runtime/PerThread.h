// Per-thread state reached in one instruction.
//
// A plain `thread_local` of a library loaded with dlopen (this extension) is
// reached through __tls_get_addr, about fourteen instructions a time, and a
// small eager op touched fifteen of them (alias pool, mask and repeat caches,
// memory counters, host-pool scope). The initial-exec model reads one with a
// single instruction, but takes its bytes from the small static-TLS surplus
// glibc keeps for such libraries (512 bytes by default, shared with every
// other library that does the same), so only ints and pointers use it
// (TORCH_NEURONX_FAST_TLS): PerThread<T> keeps one pointer there, to a T made
// on the thread's first use and destroyed when the thread ends.
#pragma once

#include <c10/macros/Macros.h>

#include <cstdint>

#define TORCH_NEURONX_FAST_TLS __attribute__((tls_model("initial-exec")))

namespace torch_neuronx {

template <class T>
class PerThread {
 public:
  // The calling thread's T, or nullptr once the thread is ending and its T
  // has been destroyed (a tensor freed by a later thread_local destructor):
  // callers take their slow path then.
  static T* get() {
    T* state = state_;
    if (C10_LIKELY(reinterpret_cast<uintptr_t>(state) > kEnded)) {
      return state;
    }
    return state == nullptr ? create() : nullptr;
  }

 private:
  static constexpr uintptr_t kEnded = 1;

  // Out of line: each caller's fast path stays a load and a compare.
  C10_NOINLINE static T* create() {
    T* state = new T();
    owner_.armed = true; // constructs the owner, destroyed when the thread ends
    state_ = state;
    return state;
  }

  struct Owner {
    bool armed = false;
    ~Owner() {
      T* state = state_;
      state_ = reinterpret_cast<T*>(kEnded);
      delete state;
    }
  };

  static inline thread_local T* state_ TORCH_NEURONX_FAST_TLS = nullptr;
  static inline thread_local Owner owner_;
};

} // namespace torch_neuronx
