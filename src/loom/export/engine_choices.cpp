#include "loom/export/engine_choices.h"

#include <fmt/format.h>

#include "loom/export/pytorch_schedule.h"

namespace loom {

std::vector<MegatronExport> MegatronExports(const Comparison& cmp, const Model& model, const MegatronTarget& target) {
  std::vector<MegatronExport> out(cmp.outcomes.size());
  for (size_t i = 0; i < cmp.outcomes.size(); ++i) {
    if (cmp.outcomes[i].ok()) out[i] = ExportMegatron(cmp.outcomes[i].result.plan, model, target);
  }
  return out;
}

std::vector<EngineChoice> BestPlanPerEngine(const Comparison& cmp, const Model& model,
                                            const std::vector<MegatronExport>& megatron) {
  std::vector<EngineChoice> out = {{"Megatron-LM, one grid", "--export megatron"},
                                   {"Megatron-LM MIMO (encoder and LLM grids)", "--export megatron"},
                                   {"PyTorch pipelining / torchtitan", "simulate --plan --export-pytorch-csv"},
                                   {"Loom's runtime", "loom run --plan"}};
  if (cmp.best < 0) return out;
  const double best_s = cmp.outcomes[cmp.best].mean_iteration_time_s;
  for (size_t i = 0; i < cmp.outcomes.size(); ++i) {
    const StrategyOutcome& o = cmp.outcomes[i];
    if (!o.ok()) continue;
    const MegatronExport& m = megatron[i];
    const bool runs[4] = {m.expressible && o.result.plan.units.size() == 1,
                          m.expressible && o.result.plan.units.size() == 2,
                          ExportPytorchSchedule(o.first_run.exec, false).expressible, model.planning_only.empty()};
    for (int e = 0; e < 4; ++e) {
      if (!runs[e]) continue;
      if (out[e].outcome < 0 || o.mean_iteration_time_s < cmp.outcomes[out[e].outcome].mean_iteration_time_s) {
        out[e].outcome = static_cast<int>(i);
        out[e].slowdown = o.mean_iteration_time_s / best_s;
      }
    }
  }
  return out;
}

std::string FormatEngineChoices(const Comparison& cmp, const std::vector<EngineChoice>& choices) {
  if (cmp.best < 0) return "";
  std::string out = fmt::format("Best plan each engine can run (against the best, {}):\n", cmp.outcomes[cmp.best].name);
  for (const auto& c : choices) {
    std::string what = "none of these plans";
    if (c.outcome >= 0) {
      what = fmt::format("{:<14} {}  ({})", cmp.outcomes[c.outcome].name,
                         c.outcome == cmp.best ? "the best" : fmt::format("{:.2f}x slower", c.slowdown), c.how);
    }
    out += fmt::format("  {:<42} {}\n", c.engine, what);
  }
  return out;
}

nlohmann::json EngineChoicesJson(const Comparison& cmp, const std::vector<EngineChoice>& choices) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& c : choices) {
    nlohmann::json e;
    e["engine"] = c.engine;
    e["strategy"] = c.outcome >= 0 ? nlohmann::json(cmp.outcomes[c.outcome].name) : nlohmann::json(nullptr);
    e["slowdown"] = c.outcome >= 0 ? nlohmann::json(c.slowdown) : nlohmann::json(nullptr);
    j.push_back(e);
  }
  return j;
}

}  // namespace loom
