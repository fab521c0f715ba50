// Beside the best plan, the best plan each engine a user may have can run
// (issue 43): Megatron-LM's one grid, its MIMO example's two grids,
// PyTorch's pipelining (torchtitan), and Loom's own runtime, with what
// choosing it costs against the best. A plan counts for an engine when its
// export is accepted (ExportMegatron with Megatron-LM's rules,
// ExportPytorchSchedule) or, for Loom's runtime, when the model is not read
// for planning only.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "loom/export/megatron_args.h"
#include "loom/session/compare_strategies.h"

namespace loom {

struct EngineChoice {
  std::string engine;   // "Megatron-LM, one grid", ...
  std::string how;      // the flag that writes its launch
  int outcome = -1;     // index into Comparison::outcomes; -1: no plan this engine can run
  double slowdown = 0;  // its mean iteration time / the best's
};

// Each outcome's Megatron-LM export (same indices; empty for one that failed), made once for
// the engines, the JSON and `--export megatron`.
std::vector<MegatronExport> MegatronExports(const Comparison& cmp, const Model& model, const MegatronTarget& target);
std::vector<EngineChoice> BestPlanPerEngine(const Comparison& cmp, const Model& model,
                                            const std::vector<MegatronExport>& megatron);
std::string FormatEngineChoices(const Comparison& cmp, const std::vector<EngineChoice>& choices);
nlohmann::json EngineChoicesJson(const Comparison& cmp, const std::vector<EngineChoice>& choices);

}  // namespace loom
