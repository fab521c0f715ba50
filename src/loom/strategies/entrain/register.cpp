// Entrain (seed 004 ch. 4).
#include "loom/strategies/entrain/entrain.h"
#include "loom/strategies/registry.h"

namespace loom {
namespace {

const StrategyRegistration kEntrain({"entrain",
                                     "Entrain: encoder and LLM on disjoint GPUs split by macroscopic profiling "
                                     "(Alg. 2) and configuration search (Alg. 3); per batch stratified microbatches, "
                                     "pairwise deferral, split-backward eager 1F1B",
                                     140, EntrainStrategy, [] { return std::make_unique<EntrainScheduler>(); }, false,
                                     true});

// Ablations (§4.7's breakdown): Entrain's plan, each batch without pairwise
// deferral (stratified microbatches, plain 1F1B in slots), without the eager
// warm-up slot, or with zero-bubble backwards; `schedule` names the batch
// schedule in the configuration line.
StrategyResult Variant(const StrategyContext& ctx, const std::string& name, const std::string& schedule) {
  StrategyResult r = EntrainStrategy(ctx);
  r.plan.strategy = name;
  const std::string from = "deferral-aware 1f1b";
  if (const size_t at = r.config.find(from); at != std::string::npos) r.config.replace(at, from.size(), schedule);
  return r;
}
StrategyResult EntrainNoDeferral(const StrategyContext& ctx) {
  return Variant(ctx, "entrain-nodefer", "stratified 1f1b, no deferral");
}
StrategyResult EntrainNoEager(const StrategyContext& ctx) {
  return Variant(ctx, "entrain-noeager", "deferral-aware 1f1b, no eager slot");
}
StrategyResult EntrainZeroBubble(const StrategyContext& ctx) {
  return Variant(ctx, "entrain-zb", "deferral-aware zb-h1");
}
std::function<std::unique_ptr<BatchScheduler>()> Scheduler(EntrainScheduleOptions options) {
  return [options] { return std::make_unique<EntrainScheduler>(options); };
}

const StrategyRegistration kNoDeferral({"entrain-nodefer",
                                        "Entrain's plan and stratified microbatches without pairwise deferral", 1040,
                                        EntrainNoDeferral, Scheduler({false, 1, false}), true, true});
const StrategyRegistration kNoEager({"entrain-noeager", "Entrain without the eager warm-up slot", 1041, EntrainNoEager,
                                     Scheduler({true, 0, false}), true, true});
const StrategyRegistration kZeroBubble({"entrain-zb",
                                        "Entrain's plan and deferral with zero-bubble backwards (ZB-H1's weight lag)",
                                        1042, EntrainZeroBubble, Scheduler({true, 1, true}), true, true});

}  // namespace
}  // namespace loom
