#include "loom/runtime/tensor_memory.h"

#include <c10/core/Allocator.h>
#include <c10/util/ThreadLocalDebugInfo.h>

#include <algorithm>
#include <atomic>

namespace loom::runtime {

// libtorch's allocator reports every allocation and free to the profiler's
// debug info (c10::reportMemoryUsageToProfiler): this one sums them.
struct TensorMemoryCounter::State : public c10::MemoryReportingInfoBase {
  std::atomic<int64_t> live{0}, peak{0};

  void Add(int64_t bytes) {
    const int64_t now = live.fetch_add(bytes) + bytes;
    int64_t seen = peak.load();
    while (now > seen && !peak.compare_exchange_weak(seen, now)) {
    }
  }
  void reportMemoryUsage(void*, int64_t alloc_size, size_t, size_t, c10::Device) override { Add(alloc_size); }
  bool memoryProfilingEnabled() const override { return true; }
};

struct TensorMemoryCounter::Guard {
  explicit Guard(std::shared_ptr<c10::DebugInfoBase> info)
      : guard(c10::DebugInfoKind::PROFILER_STATE, std::move(info)) {}
  c10::DebugInfoGuard guard;
};

TensorMemoryCounter::TensorMemoryCounter()
    : state_(std::make_shared<State>()), guard_(std::make_unique<Guard>(state_)) {}

TensorMemoryCounter::~TensorMemoryCounter() = default;

int64_t TensorMemoryCounter::live_bytes() const { return state_->live.load(); }
int64_t TensorMemoryCounter::peak_bytes() const { return state_->peak.load(); }

void TensorMemoryCounter::ResetPeak() { state_->peak.store(state_->live.load()); }

void TensorMemoryCounter::Pause() { guard_.reset(); }

void TensorMemoryCounter::Resume() {
  if (!guard_) guard_ = std::make_unique<Guard>(state_);
}

}  // namespace loom::runtime
