#include "loom/strategies/registry.h"

#include <algorithm>

namespace loom {

namespace {

// Filled by StrategyRegistration constructors during static initialization.
std::vector<StrategyInfo>& Entries() {
  static std::vector<StrategyInfo> entries;
  return entries;
}

class FunctionScheduler final : public BatchScheduler {
 public:
  explicit FunctionScheduler(BatchScheduleFn fn) : fn_(fn) {}
  IterationSchedule Schedule(const StrategyContext& ctx, const Plan& plan, const Batch& batch,
                             int64_t iteration) override {
    return fn_(ctx, plan, batch, iteration);
  }

 private:
  BatchScheduleFn fn_;
};

}  // namespace

std::function<std::unique_ptr<BatchScheduler>()> StatelessScheduler(BatchScheduleFn fn) {
  return [fn] { return std::make_unique<FunctionScheduler>(fn); };
}

StrategyRegistration::StrategyRegistration(StrategyInfo info) {
  auto& entries = Entries();
  entries.push_back(std::move(info));
  std::stable_sort(entries.begin(), entries.end(), [](const StrategyInfo& a, const StrategyInfo& b) {
    return a.order != b.order ? a.order < b.order : a.name < b.name;
  });
}

const std::vector<StrategyInfo>& RegisteredStrategies() { return Entries(); }

const StrategyInfo* FindStrategy(const std::string& name) {
  for (const auto& e : Entries()) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

}  // namespace loom
