// Mosaic §3.3(a): each module's scaling surface, its latency as a function of
// the data-parallel degree d and the SM quota, sampled on the paper's grid
// (d a power of two up to the GPUs, quotas in steps of the search
// granularity) from Loom's cost model. What a point holds:
//   - latency: forward + backward of the module's share of the global batch
//     (B / d samples of the representative batch, in m microbatches run one
//     after another, forward then backward each; the paper runs one) on the
//     quota's SMs (cost/sm_sharing.h: SM scaling and launch floor), plus the
//     gradient all-reduce over the d GPUs; pipelined over pp groups, each of
//     the k rounds takes m / k + pp - 1 times the slowest stage;
//   - the launch floor alone (the host time the solver adds up per GPU);
//   - memory per GPU: weights, gradients, AdamW states (ZeRO-1 over d) and
//     activations of microbatches of B / (d m) samples, twice: as 1F1B keeps
//     them (the last stage's; one microbatch, or min(pp - s, m / k) on
//     pipeline stage s) and as GPipe does (a round's m / k until the backward
//     after the later stages; mapping_memory.h sums a whole mapping);
//   - bandwidth utilisation B (Eq. 8): bytes moved over latency and HBM rate.
// A quota is whole SMs the hardware can partition (SmPartitionRules): the
// grid's fraction f gets QuotaSms(f) SMs; fractions that round to the same SMs
// are one option.
#pragma once

#include <string>
#include <vector>

#include "loom/cost/sm_sharing.h"
#include "loom/cost/token_stats.h"
#include "loom/strategies/strategy.h"

namespace loom::mosaic {

struct SurfacePoint {
  int dp = 1;
  int sms = 0;  // per GPU; sm_count = the whole GPU
  double latency_s = 0;
  double launch_floor_s = 0;
  double mem_bytes = 0;       // per GPU when it runs 1F1B (the last stage): state + in-flight activations
  double bandwidth = 0;       // B in [0, 1]
  double held_mem_bytes = 0;  // per GPU when it keeps all m microbatches until its backward (GPipe)
  int pp = 1;                 // pipeline stages over a slot's groups (1: whole on each; SurfaceOptions::pp)
  int replicas = 1;           // data-parallel copies on the dp slots: dp with pp > 1; with pp = 1 one per
                              // group, fewer (the first groups) when a microbatch has fewer samples
};

struct ModuleSurface {
  std::string module;
  int index = 0;  // in Model::modules
  // By dp, then pp, then sms, increasing; (dp, pp, sms) is unique. The
  // solver chooses among these grid points only (its quotas are the grid's),
  // so nothing interpolates between them.
  std::vector<SurfacePoint> points;
  // The point (dp, pp, sms); throws loom::Error when there is none.
  const SurfacePoint& At(int dp, int pp, int sms) const;
};

struct SurfaceOptions {
  double granularity = 0.1;  // SM-quota step (Mosaic's default 10%)
  // Activation recomputation of every module (the paper is silent; Loom
  // raises it only when a module fits no GPU without).
  Recompute recompute = Recompute::kNone;
  // Whole GPUs only (a in {0, 1}): the restriction under which Mosaic's
  // formulation describes DistMM and Spindle (§3.1).
  bool whole_gpus = false;
  // GPUs per slot: every module tensor-parallel over `tp` GPUs of a node
  // (Megatron's split; modules whose heads do not divide share sequences
  // instead), the slots being what the solver places and quotas. 1 is the
  // paper (DP only); Loom adds larger slots for modules that do not fit whole
  // (mosaic.h).
  int tp = 1;
  // Groups of tp GPUs per slot (Loom's extension for modules too big for a
  // node): a module is pipelined over a slot's pp groups (pp stages balanced
  // by time) or, when that is not faster or it has fewer layers, data
  // parallel over them (SurfacePoint::pp says which). REQUIRES: pp > 1 only
  // with m >= pp for pipelining.
  int pp = 1;
  // Gradient-accumulation steps of every module (the plan's microbatches);
  // DP degrees with fewer than m samples per replica are left out.
  int microbatches = 1;
  // The mapping's stages run this many times per iteration, each round on
  // m / rounds microbatches (Plan::phase_rounds): a stage before the last
  // keeps one round's activations; a pipelined module fills and drains its
  // pipeline once per round. REQUIRES: divides microbatches.
  int rounds = 1;
};

// One surface per module of the model, in model order; dp counts slots.
// A slot is tp x pp GPUs (pp consecutive groups of tp). `batch_tokens`:
// CountModuleTokens of ctx.representative's samples, counted once by the
// caller (a pass over the whole batch, the same for every surface).
std::vector<ModuleSurface> SampleSurfaces(const StrategyContext& ctx, const SurfaceOptions& options,
                                          const std::vector<TokenStats>& batch_tokens);

// The cluster's SM partition rules (the GPU's SMs, compute capability 9.0's
// minimum and alignment of 8).
SmPartitionRules PartitionRules(const Cluster& cluster);

}  // namespace loom::mosaic
