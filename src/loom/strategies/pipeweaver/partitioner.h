// PipeWeaver's modality-aware partitioner (§5), static and per-batch parts.
//
// Static (before training): the model's modality modules (an encoder with its
// projector, the backbone, a generator), each one's sub-microbatch size B_i
// (the smallest whose GPU efficiency reaches 95% of the best), its segment
// count K_i = floor(T_i / T_1), and a layer placement that spreads module i
// over P x K_i model chunks, chunk c on pipeline rank c % P, so stages of two
// modalities never share a pipeline segment. The placement is a valid
// interleaved plan on its own ("partitioner only" in the ablation).
// Per batch: M_i = ceil(N_i / B_i) sub-microbatches of module i per global
// microbatch, N_i being the sequences (images, clips, packed samples) module
// i sees in it.
#pragma once

#include <string>
#include <vector>

#include "loom/plan/plan.h"
#include "loom/strategies/strategy.h"

namespace loom {

// A modality module: consecutive model modules (in model order) trained as
// one pipeline segment group.
struct ModalityModule {
  std::string name;  // its first module's name
  std::vector<std::string> modules;
  int layers = 0;
  int sub_microbatch_size = 1;  // B_i, in sequences of its first module
  double time_s = 0;            // T_i: forward + backward of the representative batch at the plan's TP
  int segments = 1;             // K_i
};

// Module groups: every module that is not a projector starts one; a projector
// joins the group before it. A group with fewer layers than `pp` joins the
// next one (the last joins the previous one) so every segment spans all ranks.
std::vector<ModalityModule> ModalityModules(const Model& model, int pp);

// Candidate sub-microbatch sizes: 1, 2, 4, ..., 64.
std::vector<int> SubMicrobatchSizes();
// Useful FLOP/s of one GPU running `module` on a microbatch of b sequences of
// the representative batch's mean shape at tensor parallel `tp`.
double ModuleThroughput(const StrategyContext& ctx, const ModalityModule& module, int tp, int b);
// B_i: the smallest candidate size whose throughput (useful FLOPs per second
// at `tp`, per-sequence shape averaged over the representative batch) reaches
// `fraction` (0.95) of the best candidate's. 1 when the module sees nothing.
int SubMicrobatchSize(const StrategyContext& ctx, const ModalityModule& module, int tp, double fraction = 0.95);

// K_i = floor(T_i / T_min), kept within [1, min(max_segments, layers / pp)].
// PipeWeaver §5; the cap keeps a chunk at one layer or more, and bounds the
// per-batch search (the paper does not bound K_i).
std::vector<int> SegmentCounts(const std::vector<double>& times_s, const std::vector<int>& layers, int pp,
                               int max_segments = 4);

// The static part for (tp, pp): modality modules with B_i, T_i and K_i filled.
std::vector<ModalityModule> StaticPartition(const StrategyContext& ctx, int tp, int pp);

// One unit, one interleaved template of pp x sum(K_i) stages: module i's
// layers cut into pp x K_i chunks by the min-max partition of their forward +
// backward time (so uneven layer counts put the extra layers where they cost
// least; uniform layers get floor/ceil counts), chunk c of a module on rank c % pp.
Plan WovenPlan(const StrategyContext& ctx, const std::vector<ModalityModule>& modules, int tp, int pp, int dp,
               int microbatches, Recompute recompute);

// Per module of the plan, the per-global-microbatch counts M_i = ceil(N_i / B_i),
// at most the samples a replica holds of that microbatch, or its images /
// clips for modules that see only those (plan/compile_woven.cpp).
std::map<std::string, std::vector<int>> SubMicrobatchCounts(const Model& model, const Plan& plan,
                                                            const std::vector<ModalityModule>& modules,
                                                            const Batch& batch,
                                                            const std::vector<std::vector<int>>& microbatch_samples);

}  // namespace loom
