// Megatron-LM launch bundles for a plan Megatron-LM can run: one unit holding
// every module (the encoders with the first stage, as current Megatron-LM
// runs them; pretrain_gpt.py or pretrain_vlm.py), or the MIMO example's
// encoder and LLM grids (examples/mimo/pretrain_mimo.py); one pipeline
// template, whole-GPU SMs, ZeRO stage 0 or 1. A bundle is the entry script,
// the environment and every flag: the LLM's shape, the grid, the layout
// (`--pipeline-model-parallel-layout`: the plan's exact stages), batch,
// recomputation, precision, and what a run needs (iterations, mock data,
// tokenizer). Each bundle is checked by Megatron-LM's own rules
// (export/megatron_rules.h); a plan that breaks one, or that Megatron-LM
// cannot express at all (several units, phases, heterogeneous pipelines,
// FSDP), gets the reason naming the rule instead.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "loom/export/megatron_rules.h"
#include "loom/plan/plan.h"
#include "loom/spec/model.h"

namespace loom {

// What the bundle needs beyond the plan: the workload's sequence length and
// precision, the GPUs (Blackwell lifts the CUDA_DEVICE_MAX_CONNECTIONS rule).
struct MegatronTarget {
  int64_t seq_len = 4096;  // --seq-length: the LLM's tokens per sample (text) or its longest sequence
  std::string precision = "bf16";
  int gpus_per_node = 8;
  bool blackwell = false;
  int64_t train_iters = 1000;
  // --lr: Megatron-LM has no default peak rate (its scheduler reads
  // float(args.lr)); a placeholder for the user's own.
  double lr = 3e-4;
};

struct MegatronExport {
  bool expressible = false;
  MegatronLaunch launch;  // when expressible
  std::string args;       // its flags, one per line (continuations)
  std::string notes;      // what Megatron-LM will do differently, or why it cannot run the plan
};

MegatronExport ExportMegatron(const Plan& plan, const Model& model, const MegatronTarget& target = {});
// The bundle as `loom plan --json` records it: {"expressible", "entry", "env", "args", "command", "notes"}.
nlohmann::json MegatronExportJson(const MegatronExport& e);
// The text `loom plan --export megatron` prints for one strategy.
std::string FormatMegatronExport(const std::string& strategy, const MegatronExport& e, int gpus_per_node = 8);

}  // namespace loom
