// Megatron-LM command-line arguments for a plan Megatron-LM can run: one unit
// holding every module (encoders in the first stages), one pipeline template,
// whole-GPU SMs, ZeRO stage 0 or 1. Anything else (several units, phases,
// heterogeneous pipelines, FSDP) gets an explanation of why it cannot be
// expressed instead. Megatron-LM cuts stages by its own rule, so a plan whose
// stage boundaries differ from an even split is listed stage by stage.
#pragma once

#include <string>

#include "loom/plan/plan.h"
#include "loom/spec/model.h"

namespace loom {

struct MegatronExport {
  bool expressible = false;
  std::string args;   // the arguments, one per line (continuations), when expressible
  std::string notes;  // what Megatron-LM will do differently, or why it cannot run the plan
};

MegatronExport ExportMegatron(const Plan& plan, const Model& model);
// The text `loom plan --export megatron` prints for one strategy.
std::string FormatMegatronExport(const std::string& strategy, const MegatronExport& e);

}  // namespace loom
