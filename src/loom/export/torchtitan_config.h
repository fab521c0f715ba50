// torchtitan's current configuration (2026: a Python function returning a
// Trainer.Config, selected with `--module M --config F`; its TOML files and
// CLI flags are frozen for removal; torchtitan/config/README.md) for a plan
// PyTorch pipelining can run: the module `loom simulate --export-torchtitan`
// writes derives from a base recipe (torchtitan's llama3_8b unless told) and
// sets what the plan fixes: the parallel degrees, the pipeline CSV
// (`pipeline_parallel_schedule_csv`, which torchtitan runs with
// _PipelineScheduleRuntime), the stages' modules
// (`module_fqns_per_model_part`, torchtitan's Llama names), the microbatch
// tokens and the activation checkpointing. Field names are torchtitan's
// ParallelismConfig and TrainingConfig at commit b5bcd76 (2026-08-21).
#pragma once

#include <string>

#include "loom/export/pytorch_schedule.h"
#include "loom/plan/execution_plan.h"
#include "loom/spec/model.h"

namespace loom {

struct TorchtitanExport {
  bool expressible = false;
  std::string python;  // the module's text, when expressible
  std::string notes;   // what differs from the plan, or why torchtitan cannot run it
};

struct TorchtitanOptions {
  std::string base = "torchtitan.models.llama3.config_registry:llama3_8b";  // MODULE:FUNCTION of the recipe
  std::string csv_path;               // the schedule CSV the config names (written beside it)
  int64_t tokens_per_microbatch = 0;  // per data-parallel rank, before TP / CP sharding
  int64_t max_context_tokens = 0;     // the longest sequence
};

// REQUIRES: csv.expressible (ExportPytorchSchedule of the same `exec`).
TorchtitanExport ExportTorchtitan(const ExecutionPlan& exec, const PytorchExport& csv, const Model& model,
                                  const TorchtitanOptions& options);

}  // namespace loom
