// What a child process forked from this one keeps, and what it must not
// (Fork.cpp).
#pragma once

#include <mutex>
#include <new>

namespace torch_neuronx {

// Runs `handler` in the child right after fork() (pthread_atfork), before any
// Python code. Components register once, at load time, for the state fork()
// copies but the child must not keep: locks and per-process counters.
// Handlers must not throw.
bool on_fork_child(void (*handler)());

// fork() copies only the calling thread: a lock another thread held at that
// moment stays locked forever in the child. The child replaces it with a
// fresh one (the forking thread itself holds none of the runtime's locks:
// it calls fork() from Python, never from inside a kernel).
inline void recreate_lock(std::mutex& mutex) {
  new (&mutex) std::mutex();
}

} // namespace torch_neuronx
