#include "loom/strategies/strategy.h"

#include <fmt/format.h>

#include "loom/error.h"
#include "loom/strategies/baselines/baselines.h"

namespace loom {

namespace {

struct Entry {
  const char* name;
  StrategyResult (*run)(const StrategyContext&);
  const char* description;
};

const std::vector<Entry>& Registry() {
  static const std::vector<Entry> entries = {
      {"megatron", MegatronStrategy,
       "Megatron-LM: one pipeline, encoders first, stages balanced by parameters; TP/PP/DP/microbatches/1F1B or "
       "interleaved/recompute searched"},
      {"fsdp", FsdpStrategy, "FSDP / ZeRO-3 data parallelism over every GPU"},
      {"distmm", DistMmStrategy,
       "DistMM: parallel branches on disjoint whole-GPU sets sized by time, dependent modules in waves"},
      {"optimus", OptimusStrategy,
       "Optimus (coarse-grained): encoders data parallel on the backbone's GPUs, scheduled around its pipeline"},
      {"nnscaler", NnScalerStrategy,
       "nnScaler*: one static 1F1B plan, stages balanced by time on a representative batch"},
  };
  return entries;
}

}  // namespace

std::vector<std::string> StrategyNames() {
  std::vector<std::string> names;
  for (const auto& e : Registry()) names.push_back(e.name);
  return names;
}

std::string StrategyDescription(const std::string& name) {
  for (const auto& e : Registry()) {
    if (name == e.name) return e.description;
  }
  return "";
}

StrategyResult RunStrategy(const std::string& name, const StrategyContext& ctx) {
  for (const auto& e : Registry()) {
    if (name == e.name) return e.run(ctx);
  }
  throw Error(fmt::format("unknown strategy '{}'; valid: {}, or all", name, fmt::join(StrategyNames(), ", ")));
}

}  // namespace loom
