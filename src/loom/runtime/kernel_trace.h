// `loom run --kernel-trace DIR`: PyTorch's own profiler (Kineto, as
// torch.profiler runs it) over one worker's last step, written as a Chrome
// trace (Perfetto, chrome://tracing) to DIR/process-N.json. Every ATen
// operator the step ran, on the host, and on a GPU every kernel and copy with
// its stream: where `--trace` shows the plan's actions, this shows what each
// action launched, so that a step slower than predicted can be read kernel by
// kernel (docs/runtime.md "Kernel traces"). One profiler per process: not
// reentrant. Torch types: include from runtime .cpp files only.
#pragma once

#include <string>

namespace loom::runtime {

class KernelTrace {
 public:
  // Starts recording this thread's operators (and on `cuda`, the device's kernels).
  explicit KernelTrace(bool cuda);
  // Stops recording, if Save has not.
  ~KernelTrace();
  KernelTrace(const KernelTrace&) = delete;
  KernelTrace& operator=(const KernelTrace&) = delete;

  // Stops recording and writes the trace to `path` atomically (a temporary
  // beside it, renamed). Throws loom::Error naming the path if it cannot.
  void Save(const std::string& path);

 private:
  bool cuda_ = false;
  bool recording_ = false;
};

// DIR/process-N.json.
std::string KernelTracePath(const std::string& dir, int process);
// How many process-N.json files DIR holds.
int KernelTracesIn(const std::string& dir);

// Makes DIR if missing, or empties it of earlier traces, before any worker
// starts. Throws loom::Error when DIR is not a folder or holds files other
// than earlier traces (no output overwrites an input), or for a run of fewer
// than 2 steps: the traced step's
// tensor memory goes uncounted (the profiler takes the slot Loom's count
// reports through, runtime/tensor_memory.h), so the peak comes from the others.
void PrepareKernelTraceDir(const std::string& dir, int steps);

}  // namespace loom::runtime
