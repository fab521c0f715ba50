#include "loom/runtime/tensor_memory.h"

#include <c10/core/Allocator.h>
#include <c10/util/ThreadLocalDebugInfo.h>

#include <algorithm>
#include <atomic>

namespace loom::runtime {

// The hook's signature changed between libtorch releases (1.13: int64_t
// totals; 2.x: size_t): both overloads are declared and whichever the base
// class has is the override (the other is an unused overload).
struct TensorMemoryCounter::State : public c10::MemoryReportingInfoBase {
  std::atomic<int64_t> live{0}, peak{0};

  void Add(int64_t bytes) {
    const int64_t now = live.fetch_add(bytes) + bytes;
    int64_t seen = peak.load();
    while (now > seen && !peak.compare_exchange_weak(seen, now)) {
    }
  }
  // NOLINTNEXTLINE: overrides one of the two signatures, see above
  void reportMemoryUsage(void*, int64_t alloc_size, int64_t, int64_t, c10::Device) { Add(alloc_size); }
  void reportMemoryUsage(void*, int64_t alloc_size, size_t, size_t, c10::Device) { Add(alloc_size); }
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

}  // namespace loom::runtime
