// A Plan says where every module runs and how: the cluster's GPUs are cut into
// groups of `group_gpus` consecutive GPUs (one simulated rank each), and each
// Unit places some modules' layers on a contiguous run of groups with its own
// tensor/context parallelism, one or more pipeline templates (each run by some
// data-parallel replicas), a temporal phase and an SM fraction. One type
// expresses the five layouts of the seed systems (docs/plan-format.md):
//   1. Megatron-LM: one unit holding every module, encoders in the first stages;
//   2. MMScale: one unit per module on disjoint groups, joined by brokers;
//   3. Mosaic / DistMM: units in temporal phases sharing groups, each with an
//      SM fraction (1 for DistMM's whole GPUs);
//   4. Oobleck: one unit with several pipeline templates of different depths;
//   5. PipeWeaver / Entrain: an IterationSchedule per batch adds sample
//      placement, deferral and sub-microbatches per unit.
// Plain values; ValidatePlan (plan/validate_plan.h) checks the invariants.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "loom/cost/cp_assignment.h"
#include "loom/cost/layer_work.h"
#include "loom/pipeline/schedules.h"

namespace loom {

// Layers [begin, end) of one module.
struct LayerRange {
  std::string module;
  int begin = 0;
  int end = 0;
  bool operator==(const LayerRange&) const = default;
};

// One virtual stage of a pipeline template: the pipeline rank (0..pp-1) that
// runs it, the layers it holds in execution order, and optionally its own
// tensor-parallel degree (0: the unit's), which must divide the group's GPUs
// over the unit's CP (the rest of the group shares sequences). Generated
// schedules put stage v on rank v % pp; the custom schedule takes any mapping
// (a V shape, a loop), since its per-rank orders come with each batch.
struct StageSpec {
  int rank = 0;
  std::vector<LayerRange> layers;
  int tp = 0;
  bool operator==(const StageSpec&) const = default;
};

// A pipeline template run by `replicas` data-parallel replicas, each on pp
// groups. Stages are listed in pipeline order; interleaving puts several on one
// rank (stage v on rank v % pp for Megatron's interleaved schedule).
struct PipelineSpec {
  int replicas = 1;
  int pp = 1;
  int microbatches = 1;  // per replica per iteration
  ScheduleKind schedule = ScheduleKind::kOneFOneB;
  std::vector<StageSpec> stages;
  // GPU groups each pipeline rank spans (Oobleck: stages of different GPU
  // counts); empty: one each. A rank's stages run on all its GPUs.
  std::vector<int> rank_groups;
  int vpp() const { return pp > 0 ? static_cast<int>(stages.size()) / pp : 0; }
  int span(int rank) const { return rank_groups.empty() ? 1 : rank_groups[rank]; }
  int groups() const;  // of one replica: the sum of the ranks' spans
  bool operator==(const PipelineSpec&) const = default;
};

struct Unit {
  std::string name;
  std::vector<std::string> modules;    // the modules it holds, in the model's execution order
  int first_group = 0;                 // first GPU group it occupies
  int tp = 1;                          // tensor parallel inside a group (the rest of the group shares sequences)
  int cp = 1;                          // context parallel inside a group
  CpSplit cp_split = CpSplit::kIdeal;  // how each sequence splits over the cp ranks (cost/cp_assignment.h)
  int phase = 0;                       // temporal stage: phase q runs after phase q-1 on shared groups
  double sm_fraction = 1.0;            // share of each GPU's SMs (Mosaic); 1 = the whole GPU
  Recompute recompute = Recompute::kNone;
  int zero_stage = 1;             // 3 = fully sharded (FSDP)
  bool sequence_parallel = true;  // with tp > 1, Megatron-LM's sequence parallelism (its recommended default)
  std::vector<PipelineSpec> pipelines;

  int num_groups() const;    // sum over pipelines of replicas x pp
  int num_replicas() const;  // sum over pipelines of replicas
  bool operator==(const Unit&) const = default;
};

// Units whose data-parallel degrees differ exchange activations between the
// replicas that share samples (MMScale §6). `count` is descriptive, for
// reports: gcd(DP_from, DP_to), the number of independent groups those
// replica pairs fall into (MMScale's brokers, each concentrating and
// scattering one group's samples). CompilePlan derives the pairs, and the part
// of each producer's output every pair carries (StageEdge::share), from the
// units' sample shares (docs/plan-format.md), not from `count`; it relays
// nothing through a third rank.
struct Broker {
  std::string from;
  std::string to;
  int count = 1;
  bool operator==(const Broker&) const = default;
};

struct Plan {
  std::string strategy;
  std::string model;  // names, for reports and `loom simulate --plan` checks
  std::string cluster;
  std::string workload;
  int64_t global_batch = 0;
  int group_gpus = 1;  // GPUs per group (one simulated rank)
  // Temporal phases run this many times per iteration, each round on the
  // next 1/phase_rounds of every unit's microbatches (gradient accumulation
  // over whole phase sequences: an earlier phase keeps one round's
  // activations until its backward, not the whole batch's). REQUIRES:
  // > 1 only with units in several phases, all with the same microbatch
  // count, divisible by it.
  int phase_rounds = 1;
  std::vector<Unit> units;
  std::vector<Broker> brokers;
  std::string searched;  // what the strategy searched to find it, for reports
  // What it was made for beyond those names (issue 45; a plan file's
  // "made_for"): it replays only under the same precision, text length and
  // ZeRO stage, and its recorded per-batch schedules only under the same seed
  // (session/plan_file_replay.h). Absent from files written before Loom
  // recorded it: then nothing is checked.
  struct MadeFor {
    std::string precision;  // PrecisionName: "bf16", "fp16", "tf32", "fp32"
    int64_t seq_len = 0;    // the workload's tokens per text sample
    int zero_stage = 0;     // the workload's (--zero-stage)
    uint64_t seed = 0;      // the workload's (--seed): which samples each batch holds
    bool operator==(const MadeFor&) const = default;
  };
  std::optional<MadeFor> made_for;

  int FindUnit(const std::string& name) const;
  bool operator==(const Plan&) const = default;
};

// Which part of a backward a step runs: the fused backward, or its
// zero-bubble halves (input gradient, then weight gradient). Stored in plan
// files ("B", "Bd", "W"): append, never renumber.
enum class BackwardPart : uint8_t { kFused = 0, kData = 1, kWeight = 2 };

// One compute step of an explicit per-rank order: the forward or a backward
// (`part`) of `microbatch` at pipeline stage `stage` (an index into the plan's
// single template, or the unit's; microbatch counts the stage's
// sub-microbatches).
struct StageStep {
  bool forward = true;
  int stage = 0;
  int microbatch = 0;
  BackwardPart part = BackwardPart::kFused;  // backward steps only
  bool operator==(const StageStep&) const = default;
};

// The schedule action a step runs.
inline ActionKind StepActionKind(const StageStep& s) {
  if (s.forward) return ActionKind::kForward;
  switch (s.part) {
    case BackwardPart::kData:
      return ActionKind::kBackwardData;
    case BackwardPart::kWeight:
      return ActionKind::kBackwardWeight;
    default:
      return ActionKind::kBackward;
  }
}

// Per-layer recomputation of one (stage, sub-microbatch): one choice per layer
// of the stage, in order (JSON writes them as letters n, s, f). PipeWeaver §6.3.
struct StageRecompute {
  int stage = 0;
  int microbatch = 0;
  std::vector<Recompute> layers;
  bool operator==(const StageRecompute&) const = default;
};

// Per-batch refinement (shape 5): which samples go in which global microbatch
// (a sample placed later than its default is deferred, PipeWeaver/Entrain),
// samples held back to the next iteration, and per unit how many
// sub-microbatches each microbatch is cut into.
// PipeWeaver's per-batch pipeline (one unit, one template; docs/plan-format.md
// "Woven schedules") adds per module sub-microbatch counts, the compute order
// of every pipeline rank and per-layer recomputation.
struct IterationSchedule {
  int64_t iteration = 0;
  std::vector<std::vector<int>> microbatch_samples;          // [global microbatch] -> sample indices in the batch
  std::vector<int> deferred;                                 // sample indices left for the next iteration
  std::map<std::string, std::vector<int>> sub_microbatches;  // unit -> per global microbatch count
  // unit -> its own [microbatch] -> samples: the unit regroups the trained
  // samples into microbatches of its own (Entrain moves samples of encoder
  // microbatch i into backbone microbatch j); its broker edges become many to
  // many, each consumer microbatch waiting for every producer microbatch it
  // shares a sample with. Absent units use microbatch_samples.
  std::map<std::string, std::vector<std::vector<int>>> unit_microbatch_samples;
  // unit -> [replica] -> [microbatch] -> samples: the unit's own microbatches
  // per data-parallel replica, any count per replica (Entrain: the DP-level
  // assignment gives each replica its own samples, stratified assignment and
  // split backward give microbatches of any size). Replaces the even split of
  // microbatch_samples (or unit_microbatch_samples) over the unit's replicas;
  // its edges are many to many like unit_microbatch_samples'. It must place
  // exactly the samples of microbatch_samples, each once.
  std::map<std::string, std::vector<std::vector<std::vector<int>>>> replica_microbatch_samples;
  // unit -> [replica] -> [pipeline rank] -> compute order: this batch's order
  // of the unit's stages (StageStep::stage indexes the unit's template) over
  // the replica's microbatches, instead of its schedule generator's
  // (Entrain's deferral-aware 1F1B, strategies/entrain/deferral_schedule.h).
  // Every (stage, microbatch) of the replica appears once forward and once
  // backward on its stage's rank; CompilePlan rejects an order that deadlocks.
  std::map<std::string, std::vector<std::vector<std::vector<StageStep>>>> unit_rank_orders;
  std::map<std::string, std::vector<int>> module_sub_microbatches;  // module -> per global microbatch count
  std::vector<std::vector<StageStep>> rank_orders;  // [pipeline rank] -> compute order; empty: GPipe order
  std::optional<Recompute> recompute;               // woven: every layer's; unset: the unit's
  std::vector<StageRecompute> layer_recompute;      // per (stage, sub-microbatch) overrides of that
  // Woven: the single-unit plan runs the per-module sub-microbatches, orders or recomputation above.
  bool woven() const {
    return !module_sub_microbatches.empty() || !rank_orders.empty() || recompute.has_value() ||
           !layer_recompute.empty();
  }
  bool operator==(const IterationSchedule&) const = default;
};

}  // namespace loom
