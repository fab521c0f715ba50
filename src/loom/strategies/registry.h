// The strategy registry: each strategy folder registers its strategies with a
// StrategyRegistration object at namespace scope (strategies/*/register.cpp),
// so adding a strategy touches only its own folder. Registrations run during
// static initialization, before main; afterwards the registry is read-only
// (the one piece of global state in Loom, and it never changes once the
// program runs). The binaries link the library whole (CMakeLists.txt) so no
// registration is dropped by the linker.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "loom/strategies/strategy.h"

namespace loom {

// A strategy's per-batch refinement (plan shape 5), one object per training
// run: it may keep state across batches (Entrain carries deferred samples to
// the next batch; Oobleck re-plans after a failure). Not thread-safe.
class BatchScheduler {
 public:
  virtual ~BatchScheduler() = default;
  // The IterationSchedule of batch `iteration` of `plan`.
  virtual IterationSchedule Schedule(const StrategyContext& context, const Plan& plan, const Batch& batch,
                                     int64_t iteration) = 0;
};

// A stateless scheduler: a function of the plan and the batch.
using BatchScheduleFn = IterationSchedule (*)(const StrategyContext&, const Plan&, const Batch&, int64_t);
std::function<std::unique_ptr<BatchScheduler>()> StatelessScheduler(BatchScheduleFn fn);

struct StrategyInfo {
  std::string name;
  std::string description;
  // Position in reports and in `--strategy all`: baselines 0-99 (megatron 0,
  // the reference), seed systems from 100, ablation variants from 1000.
  int order = 0;
  StrategyResult (*plan)(const StrategyContext&) = nullptr;
  std::function<std::unique_ptr<BatchScheduler>()> batch_scheduler;  // empty: the plan is static
  bool variant = false;                                              // an ablation: runs only when named
  // Honours the context's fixed_tp / fixed_pp / fixed_dp (`--tp`, `--pp`,
  // `--dp`); RunStrategy refuses pins for the others instead of ignoring them.
  bool pinnable = false;
};

class StrategyRegistration {
 public:
  explicit StrategyRegistration(StrategyInfo info);
};

// Every registered strategy by (order, name).
const std::vector<StrategyInfo>& RegisteredStrategies();
// The entry called `name`, or null.
const StrategyInfo* FindStrategy(const std::string& name);

}  // namespace loom
