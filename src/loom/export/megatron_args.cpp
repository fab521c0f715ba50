#include "loom/export/megatron_args.h"

#include <fmt/format.h>

#include <set>

namespace loom {

MegatronExport ExportMegatron(const Plan& plan, const Model& model) {
  MegatronExport e;
  std::vector<std::string> why;
  if (plan.units.size() != 1) {
    why.push_back(fmt::format("it has {} units on separate GPUs or phases; Megatron-LM runs every module in one "
                              "pipeline with one parallel configuration",
                              plan.units.size()));
  }
  if (!plan.units.empty()) {
    const Unit& u = plan.units[0];
    if (u.pipelines.size() != 1) {
      why.push_back(fmt::format("it runs {} pipeline templates of different depths as data-parallel replicas "
                                "(Oobleck); Megatron-LM replicas are identical",
                                u.pipelines.size()));
    }
    if (u.sm_fraction < 1) why.push_back("it gives a unit a fraction of each GPU's SMs (Green Contexts)");
    if (u.zero_stage > 1) {
      why.push_back(fmt::format("it uses ZeRO stage {}; Megatron-LM's distributed optimizer shards optimizer state "
                                "only (stage 1)",
                                u.zero_stage));
    }
    if (u.tp * u.cp != plan.group_gpus) {
      why.push_back("it shares sequences inside a GPU group instead of splitting every module by TP");
    }
    for (const auto& p : u.pipelines) {
      if (!p.rank_groups.empty() && p.groups() != p.pp) {
        why.push_back("its pipeline ranks span different GPU counts; Megatron-LM gives every stage the same");
      }
      if (p.schedule == ScheduleKind::kCustom) {
        why.push_back("it runs a custom per-batch order; Megatron-LM's schedules are gpipe-like, 1f1b, interleaved");
      }
      for (const auto& st : p.stages) {
        if (st.tp > 0 && st.tp != u.tp) {
          why.push_back("a stage runs its own tensor-parallel degree; Megatron-LM uses one for every stage");
          break;
        }
      }
    }
  }
  if (!why.empty()) {
    e.notes = "Megatron-LM cannot express this plan: " + fmt::format("{}", fmt::join(why, "; ")) + ".";
    return e;
  }
  const Unit& u = plan.units[0];
  const PipelineSpec& p = u.pipelines[0];
  const int dp = p.replicas;
  const int64_t mbs = plan.global_batch / (static_cast<int64_t>(dp) * p.microbatches);
  std::vector<std::string> a;
  a.push_back(fmt::format("--tensor-model-parallel-size {}", u.tp));
  a.push_back(fmt::format("--pipeline-model-parallel-size {}", p.pp));
  if (u.cp > 1) a.push_back(fmt::format("--context-parallel-size {}", u.cp));
  if (p.vpp() > 1) {
    a.push_back(fmt::format("--num-layers-per-virtual-pipeline-stage {}",
                            model.num_layers() / static_cast<int>(p.stages.size())));
  }
  a.push_back(fmt::format("--micro-batch-size {}", mbs));
  a.push_back(fmt::format("--global-batch-size {}", plan.global_batch));
  if (u.recompute == Recompute::kFull) {
    a.push_back("--recompute-granularity full");
    a.push_back("--recompute-method uniform");
    a.push_back("--recompute-num-layers 1");
  } else if (u.recompute == Recompute::kSelective) {
    a.push_back("--recompute-granularity selective");
  }
  if (u.zero_stage == 1) a.push_back("--use-distributed-optimizer");
  a.push_back("--overlap-grad-reduce");
  e.expressible = true;
  e.args = fmt::format("{}", fmt::join(a, " \\\n  "));
  // Stage contents: Megatron-LM splits the decoder evenly and puts encoders in
  // their own first stages; list the plan's stages so a user can check.
  std::vector<std::string> notes;
  std::set<std::string> split_modules;
  for (size_t s = 0; s < p.stages.size(); ++s) {
    std::string label;
    for (const auto& r : p.stages[s].layers) {
      label += fmt::format("{}{}[{}:{}]", label.empty() ? "" : "+", r.module, r.begin, r.end);
    }
    notes.push_back(fmt::format("stage {} (rank {}): {}", s, p.stages[s].rank, label));
  }
  e.notes = "Microbatches per iteration: " + std::to_string(p.microbatches) + " per replica, data parallel " +
            std::to_string(dp) + ".\nThe plan's stages (Megatron-LM places whole encoders on the first pipeline "
            "stages and splits the backbone evenly; set --decoder-first-pipeline-num-layers / "
            "--decoder-last-pipeline-num-layers where your version has them to match):\n  " +
            fmt::format("{}", fmt::join(notes, "\n  "));
  return e;
}

std::string FormatMegatronExport(const std::string& strategy, const MegatronExport& e) {
  if (!e.expressible) return fmt::format("{}: {}\n", strategy, e.notes);
  return fmt::format("{}: Megatron-LM arguments\n  {}\n{}\n", strategy, e.args, e.notes);
}

}  // namespace loom
