#include "loom/strategies/strategy.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "loom/data/sample_source.h"
#include "loom/did_you_mean.h"
#include "loom/error.h"
#include "loom/strategies/registry.h"

namespace loom {

namespace {

const StrategyInfo& Find(const std::string& name) {
  const StrategyInfo* e = FindStrategy(name);
  if (e == nullptr) {
    throw Error(fmt::format("unknown strategy '{}'; valid: {}, or all{}", name, fmt::join(StrategyNames(true), ", "),
                            DidYouMean(name, StrategyNames(true))));
  }
  return *e;
}

}  // namespace

std::vector<std::string> StrategyNames(bool variants) {
  std::vector<std::string> names;
  for (const auto& e : RegisteredStrategies()) {
    if (variants || !e.variant) names.push_back(e.name);
  }
  return names;
}

std::string StrategyDescription(const std::string& name) {
  const StrategyInfo* e = FindStrategy(name);
  return e == nullptr ? "" : e->description;
}

StrategyResult RunStrategy(const std::string& name, const StrategyContext& ctx) {
  const StrategyInfo& info = Find(name);
  if (!info.pinnable && (ctx.fixed_tp > 0 || ctx.fixed_pp > 0 || ctx.fixed_dp > 0)) {
    std::vector<std::string> pinnable;
    for (const auto& s : RegisteredStrategies()) {
      if (s.pinnable) pinnable.push_back(s.name);
    }
    throw NotApplicable(
        fmt::format("searches its own parallel degrees and takes no --tp / --pp / --dp pin; strategies that "
                    "do: {}",
                    fmt::join(pinnable, ", ")));
  }
  return info.plan(ctx);
}

bool SchedulesBatches(const std::string& name) {
  const StrategyInfo* e = FindStrategy(name);
  return e != nullptr && static_cast<bool>(e->batch_scheduler);
}

IterationSchedule ScheduleBatch(const std::string& name, const StrategyContext& ctx, const Plan& plan,
                                const Batch& batch, int64_t iteration) {
  const StrategyInfo& e = Find(name);
  if (!e.batch_scheduler) throw Error(fmt::format("strategy '{}' does not schedule batches", name));
  return e.batch_scheduler()->Schedule(ctx, plan, batch, iteration);
}

std::vector<std::optional<IterationSchedule>> ScheduleIterations(const std::string& name, const StrategyContext& ctx,
                                                                 const Plan& plan,
                                                                 const std::vector<RecordedBatch>& recorded,
                                                                 int count) {
  std::vector<std::optional<IterationSchedule>> out(std::max(0, count));
  if (!SchedulesBatches(name)) return out;
  for (int i = 0; i < count; ++i) {
    for (const auto& b : recorded) {
      if (b.iteration == i && b.schedule) out[i] = *b.schedule;
    }
    if (!out[i]) out[i] = ScheduleBatch(name, ctx, plan, DrawBatch(ctx.workload, i), i);
  }
  return out;
}

}  // namespace loom
