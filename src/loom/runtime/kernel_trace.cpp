#include "loom/runtime/kernel_trace.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <set>
#include <system_error>

#include "loom/atomic_file.h"
#include "loom/error.h"

namespace loom::runtime {

namespace {

namespace profiler = torch::autograd::profiler;
using torch::profiler::impl::ActivityType;
using torch::profiler::impl::ProfilerConfig;
using torch::profiler::impl::ProfilerState;

// "process-N.json", N decimal digits, and what becomes of one: gzipped
// (".json.gz") or the temporary of a save that was cut short
// (TemporaryPathFor's ".json.tmp.PID").
bool IsTraceName(const std::string& name) {
  const std::string head = "process-", tail = ".json";
  if (name.rfind(head, 0) != 0) return false;
  size_t i = head.size();
  while (i < name.size() && name[i] >= '0' && name[i] <= '9') ++i;
  if (i == head.size() || name.compare(i, tail.size(), tail) != 0) return false;
  const std::string rest = name.substr(i + tail.size());
  return rest.empty() || rest == ".gz" || rest.rfind(".tmp.", 0) == 0;
}

// A CUDA build of PyTorch on a machine without a GPU has Kineto print
// "gpuGetDeviceCount failed" while it starts and stops, though only the host
// is traced: on a CPU run its standard error is muted meanwhile.
class MutedStderr {
 public:
  explicit MutedStderr(bool mute) : saved_(mute ? dup(STDERR_FILENO) : -1) {
    if (saved_ < 0) return;
    std::fflush(stderr);
    const int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (devnull >= 0) {
      dup2(devnull, STDERR_FILENO);
      close(devnull);
    }
  }
  ~MutedStderr() {
    if (saved_ < 0) return;
    std::fflush(stderr);
    dup2(saved_, STDERR_FILENO);
    close(saved_);
  }
  MutedStderr(const MutedStderr&) = delete;
  MutedStderr& operator=(const MutedStderr&) = delete;

 private:
  int saved_;
};

}  // namespace

KernelTrace::KernelTrace(bool cuda) : cuda_(cuda) {
  const ProfilerConfig config(ProfilerState::KINETO);
  std::set<ActivityType> activities{ActivityType::CPU};
  if (cuda) activities.insert(ActivityType::CUDA);
  const MutedStderr muted(!cuda);
  profiler::prepareProfiler(config, activities);
  profiler::enableProfiler(config, activities);
  recording_ = true;
}

KernelTrace::~KernelTrace() {
  if (!recording_) return;
  try {
    const MutedStderr muted(!cuda_);
    profiler::disableProfiler();
  } catch (...) {  // a destructor must not throw: the trace is dropped
  }
}

void KernelTrace::Save(const std::string& path) {
  // A GPU's kernels are collected once they have run: the step's end
  // synchronised the worker's device (CudaActionClock::EndStep).
  std::unique_ptr<profiler::ProfilerResult> result;
  {
    const MutedStderr muted(!cuda_);
    result = profiler::disableProfiler();
  }
  recording_ = false;
  // Kineto writes the file itself: into WriteFileAtomically's temporary, then renamed.
  const std::string temporary = TemporaryPathFor(path);
  try {
    result->save(temporary);
  } catch (const std::exception& e) {
    throw Error(fmt::format("--kernel-trace: cannot write {}: {}", path, e.what()));
  }
  std::error_code ec;
  std::filesystem::rename(temporary, path, ec);
  if (ec || !std::filesystem::is_regular_file(path)) {
    std::filesystem::remove(temporary, ec);
    throw Error(fmt::format("--kernel-trace: cannot write {}", path));
  }
}

std::string KernelTracePath(const std::string& dir, int process) {
  return (std::filesystem::path(dir) / fmt::format("process-{}.json", process)).string();
}

int KernelTracesIn(const std::string& dir) {
  std::error_code ec;
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    n += IsTraceName(name) && name.size() > 5 && name.compare(name.size() - 5, 5, ".json") == 0;
  }
  return n;
}

void PrepareKernelTraceDir(const std::string& dir, int steps) {
  namespace fs = std::filesystem;
  const std::string flag = "--kernel-trace " + dir;
  if (steps < 2) {
    throw Error(
        fmt::format("{}: traces the last step, whose tensor memory the profiler keeps from Loom's count; with "
                    "--steps {} no step would be counted: give --steps 2 or more",
                    flag, steps));
  }
  std::error_code ec;
  if (fs::exists(dir, ec)) {
    if (!fs::is_directory(dir, ec)) throw Error(flag + ": exists and is not a folder");
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      const std::string name = entry.path().filename().string();
      if (IsTraceName(name)) continue;
      throw Error(
          fmt::format("{}: the folder holds {}, which a kernel trace does not write; give an empty or new "
                      "folder (a trace replaces only earlier traces, process-N.json)",
                      flag, name));
    }
    if (ec) throw Error(fmt::format("{}: cannot list the folder: {}", flag, ec.message()));
    // Earlier traces go, so that what is there after the run is this run's.
    for (const auto& entry : fs::directory_iterator(dir, ec)) fs::remove(entry.path(), ec);
    return;
  }
  fs::create_directories(dir, ec);
  if (ec) throw Error(fmt::format("{}: cannot make the folder: {}", flag, ec.message()));
}

}  // namespace loom::runtime
