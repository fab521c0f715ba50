// Entrain as a strategy (seed 004 ch. 4; docs/strategies.md, "entrain"): the
// planner (macroscopic profiling, Algorithm 2; configuration search,
// Algorithm 3) and the per-iteration scheduler (DP-level assignment,
// stratified microbatches, pairwise deferral, the deferral-aware 1F1B).
//
// Plan shape: two units on disjoint GPUs, "encoder" (every module upstream of
// the backbone, the thesis' merged encoder) and "llm" (the backbone and what
// follows), each with its own TP, CP and PP, the same DP (the thesis' one
// data-parallel degree) and K = B / (DP mu) microbatches per replica. The
// units' schedules are 1F1B; each batch replaces them with its own orders.
#pragma once

#include <string>
#include <vector>

#include "loom/strategies/entrain/sample_work.h"
#include "loom/strategies/registry.h"

namespace loom {

struct EntrainUnits {
  std::vector<std::string> encoder;  // upstream of the backbone, model order
  std::vector<std::string> llm;      // the rest
};
// Throws loom::Error when the model has no module upstream of its backbone.
EntrainUnits SplitEntrainUnits(const Model& model);

// EstimateMacroscopicProportions (§4.4.2): the encoder's and the LLM's share
// of the work of `samples` (summing to 1).
std::vector<double> MacroscopicProportions(const Model& model, const LayerCurves& curves,
                                           const std::vector<Sample>& samples);
// The same from each sample's CountModuleTokens.
std::vector<double> MacroscopicProportions(const LayerCurves& curves,
                                           const std::vector<std::vector<TokenStats>>& sample_tokens);

StrategyResult EntrainStrategy(const StrategyContext& ctx);

struct EntrainScheduleOptions {
  bool deferral = true;      // pairwise deferral (§4.5.2); off: stratified microbatches only
  int eager_slots = 1;       // extra warm-up slots on encoder ranks (deferral_schedule.h)
  bool zero_bubble = false;  // split every backward, weight halves lagged as ZB-H1 does
};

// The IterationSchedule of one batch of an Entrain plan: per replica its
// samples (DpAssignment), their stratified microbatches, the deferral plan
// and the deferral-aware 1F1B orders. `curves`: FitModelCurves at the plan's
// per-module TP. Deterministic.
IterationSchedule EntrainScheduleBatch(const Model& model, const Plan& plan, const Batch& batch, int64_t iteration,
                                       const LayerCurves& curves, const EntrainScheduleOptions& options = {});

// Per module, the TP of the unit holding it (1 where none does).
std::vector<int> ModuleTensorParallel(const Model& model, const Plan& plan);

// The per-batch scheduler: keeps the fitted curves of the plan it last saw.
class EntrainScheduler : public BatchScheduler {
 public:
  explicit EntrainScheduler(EntrainScheduleOptions options = {}) : options_(options) {}
  IterationSchedule Schedule(const StrategyContext& context, const Plan& plan, const Batch& batch,
                             int64_t iteration) override;

 private:
  EntrainScheduleOptions options_;
  std::vector<int> tp_;  // the TPs the curves were fitted at
  LayerCurves curves_;
};

}  // namespace loom
