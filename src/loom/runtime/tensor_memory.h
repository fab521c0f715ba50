// The bytes of tensors a worker holds, counted exactly through c10's
// memory-reporting hook (the one PyTorch's profiler uses with
// profile_memory): while a TensorMemoryCounter lives, every CPU (and CUDA)
// allocation and free made on this thread, and by the autograd work it
// starts, reports its size here. Peak live bytes is the runtime's measure of
// activation memory to set beside the simulator's: unlike resident memory it
// excludes libtorch itself and the allocator's caches, and it is deterministic
// for a given plan and batch. Only tensors allocated while the counter lives
// are counted (weights built before it are not; gradients and optimizer state
// allocated in the first step are). A tensor freed on another thread goes
// uncounted: the collectives wait until the group's thread has let go of
// their buffers (c10d_calls.h AwaitRelease), else the count drifted up by
// what it held at each collective. Not thread-safe across counters: one per
// worker thread.
#pragma once

#include <cstdint>
#include <memory>

namespace loom::runtime {

class TensorMemoryCounter {
 public:
  TensorMemoryCounter();   // starts counting on this thread
  ~TensorMemoryCounter();  // stops
  TensorMemoryCounter(const TensorMemoryCounter&) = delete;
  TensorMemoryCounter& operator=(const TensorMemoryCounter&) = delete;

  int64_t live_bytes() const;
  int64_t peak_bytes() const;
  // Starts the peak afresh from the live bytes (a phase's own peak).
  void ResetPeak();
  // Stops counting until Resume, leaving c10's memory-reporting slot to
  // PyTorch's profiler (runtime/kernel_trace.h), which cannot share it. Frees
  // after Resume of tensors allocated in between lower the live count below
  // the truth: pause only over a run's last step, whose bytes then go uncounted.
  void Pause();
  void Resume();

 private:
  struct State;
  std::shared_ptr<State> state_;
  struct Guard;
  std::unique_ptr<Guard> guard_;
};

}  // namespace loom::runtime
