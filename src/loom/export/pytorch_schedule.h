// PyTorch pipelining's schedule CSV, both ways. torch.distributed.pipelining
// (`_PipelineScheduleRuntime._load_csv`, what torchtitan's
// `pipeline_parallel_schedule_csv` feeds) reads one row per pipeline rank, no
// header, each cell one action STAGE TYPE MICROBATCH: `0F0` forward, `2B1`
// full backward, `1I3` input gradient, `1W3` weight gradient; a row is that
// rank's order, not time steps (PipelineScheduleMulti's own `_load_csv`
// reads columns as time steps and runs these files wrongly: use the runtime
// class). Its "compute_comms" form adds the point-to-point actions
// `0SEND_F0`, `1RECV_F0`, `1SEND_B0`, `0RECV_B0` (a receive names the
// receiving stage, as PyTorch's own lowering writes it) and `0REDUCE_GRAD`
// after a stage's last backward, which scales its gradients by the
// microbatch count; the compute_only form leaves all of those to PyTorch.
// Stages are the global virtual stages of one pipeline; every data-parallel
// replica runs the same rows. tests/python/test_pytorch_pipelining.py runs
// these files with PyTorch's runtime against `loom run` on the same plan.
//
// Export takes a compiled ExecutionPlan: only one pipeline whose stages all
// run the same microbatches, replicated over DP, is something PyTorch can run;
// anything else gets the reason instead. Import reads a CSV into per-rank
// compute orders that Loom compiles as a custom schedule.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/plan/execution_plan.h"
#include "loom/plan/plan.h"
#include "loom/sim/plan_run.h"
#include "loom/strategies/baselines/megatron_config.h"

namespace loom {

// Stored in files: append, never renumber.
enum class PtActionType : uint8_t {
  kF = 0,
  kB = 1,
  kI = 2,
  kW = 3,
  kSendF = 4,
  kRecvF = 5,
  kSendB = 6,
  kRecvB = 7,
  kReduceGrad = 8,  // "0REDUCE_GRAD": no microbatch
};

struct PtAction {
  int stage = 0;
  PtActionType type = PtActionType::kF;
  int microbatch = 0;
  bool operator==(const PtAction&) const = default;
};
using PtSchedule = std::vector<std::vector<PtAction>>;  // [pipeline rank] -> actions in order

// "1I3", "0SEND_F2", "1REDUCE_GRAD".
std::string PtActionName(const PtAction& a);

struct PytorchExport {
  bool expressible = false;
  PtSchedule order;             // when expressible
  std::vector<int> stage_rank;  // virtual stage -> pipeline rank
  int num_microbatches = 0;     // per replica
  std::string notes;            // the stage placement torchtitan must match, or why it cannot be expressed
};

// The pipeline of `exec` as PyTorch's actions; `with_comms` adds the sends
// and receives and each stage's REDUCE_GRAD (compute_comms, as PyTorch's
// lowering writes them), else compute only (compute_only, what torchtitan's
// pipeline_parallel_schedule_csv loads).
PytorchExport ExportPytorchSchedule(const ExecutionPlan& exec, bool with_comms);
std::string FormatPytorchCsv(const PtSchedule& order);

// Reads a CSV; `file` names it in errors ("FILE:LINE:COLUMN: cell 'X': ...").
// Empty cells are bubbles and are skipped; UNSHARD / RESHARD (FSDP) and
// REDUCE_GRAD (the gradients' scaling, which Loom prices with the step) are
// accepted and dropped.
PtSchedule ParsePytorchCsv(const std::string& text, const std::string& file);

// PyTorch's own rules (schedules.py `_validate_schedule`): every rank
// 0..pp-1 has a row; each stage runs on exactly one rank; per stage F count
// = microbatches, I count = W count, B + I = microbatches; a B or I only
// after its F, a W only after its I. Sends and receives are not counted.
// Throws loom::Error naming `file`, the rank, stage and microbatch.
void ValidatePytorchSchedule(const PtSchedule& order, int pp, int num_stages, int num_microbatches,
                             const std::string& file);

// The compute actions of a CSV as Loom's per-rank orders (F -> F, B -> B,
// I -> Bd, W -> W) with each stage's rank; stages and microbatches are
// counted from the file, which must then pass ValidatePytorchSchedule.
struct ImportedPytorchSchedule {
  int pp = 0, num_stages = 0, num_microbatches = 0;
  std::vector<int> stage_rank;
  std::vector<std::vector<StageStep>> rank_orders;
};
ImportedPytorchSchedule ImportPytorchSchedule(const PtSchedule& order, const std::string& file);

// `loom simulate --import-pytorch-csv`: the Megatron-LM layout of `config`
// (its TP, DP, CP and recomputation; PP, stages per rank and microbatches
// from the CSV) run in the CSV's order: one unit on the custom schedule, each
// stage on the CSV's rank, every replica the same rows, batch `iteration`.
// Throws loom::Error for a layout that does not match the file or the
// cluster, or a plan that does not fit.
PlanRun SimulatePytorchSchedule(const Model& model, const Cluster& cluster, const Workload& workload,
                                ParallelConfig config, const ImportedPytorchSchedule& schedule, const std::string& file,
                                int64_t iteration = 0);

}  // namespace loom
