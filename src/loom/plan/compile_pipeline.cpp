// Plan shape 1 (Megatron-LM, FSDP, nnScaler): one unit, one pipeline
// template. The schedule is one replica's pipeline (gpipe, 1f1b, interleaved
// or zb-h1 over pp ranks); every data-parallel replica runs it on its own slice
// of each global microbatch, so the ExecutionPlan is `replicated`.
#include <fmt/format.h>

#include <numeric>

#include "loom/pipeline/schedules.h"
#include "loom/plan/compile_shapes.h"

namespace loom {

void CompilePipeline(const Model& model, const Plan& plan, const IterationSchedule* it,
                     const std::vector<std::vector<int>>& global_mbs, ExecutionPlan& out,
                     const CompileOptions& options) {
  const Unit& unit = plan.units[0];
  const PipelineSpec& ps = unit.pipelines[0];
  const int D = ps.replicas, S = static_cast<int>(ps.stages.size()), m = ps.microbatches;
  std::vector<int> subs(m, 1);
  if (it != nullptr && it->sub_microbatches.count(unit.name)) subs = it->sub_microbatches.at(unit.name);
  const int M = std::accumulate(subs.begin(), subs.end(), 0);

  out.replicated = true;
  out.schedule = MakeSchedule(ps.schedule, ps.pp, M, ps.vpp());
  out.ranks = TemplateRanks(plan, 0, 0, 0, unit.first_group, unit.name);
  for (int s = 0; s < S; ++s) out.stages.push_back(StageOf(model, plan, 0, 0, 0, ps.stages[s]));

  // Replica d takes slice d of every global microbatch, cut into its sub-microbatches.
  const int only = options.only_replica;
  out.replicas.assign(only >= 0 ? 1 : D, std::vector<std::vector<MicrobatchWork>>(S));
  for (int k = 0; k < m; ++k) {
    const auto slices = SplitEven(global_mbs[k], D);
    for (int d = 0; d < D; ++d) {
      if (only >= 0 && d != only) continue;
      for (const auto& sub : SplitEven(slices[d], subs[k])) {
        MicrobatchWork mb;
        for (int s : sub) mb.pieces.push_back({s, -1});
        for (int s = 0; s < S; ++s) out.replicas[only >= 0 ? 0 : d][s].push_back(mb);
      }
    }
  }
}

}  // namespace loom
