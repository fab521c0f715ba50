// Entrain (seed 004 ch. 4).
#include "loom/strategies/entrain/entrain.h"
#include "loom/strategies/registry.h"

namespace loom {
namespace {

const StrategyRegistration kEntrain({"entrain",
                                     "Entrain: encoder and LLM on disjoint GPUs split by macroscopic profiling "
                                     "(Alg. 2) and configuration search (Alg. 3); per batch stratified microbatches, "
                                     "pairwise deferral, split-backward eager 1F1B",
                                     140, EntrainStrategy,
                                     [] { return std::make_unique<EntrainScheduler>(); }});

std::string ReplaceAll(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
  return s;
}

// Ablations (§4.7's breakdown): Entrain's plan, each batch without pairwise
// deferral (stratified microbatches, plain 1F1B in slots), or without the
// eager warm-up slot.
StrategyResult EntrainNoDeferral(const StrategyContext& ctx) {
  StrategyResult r = EntrainStrategy(ctx);
  r.plan.strategy = "entrain-nodefer";
  r.config = ReplaceAll(r.config, "deferral-aware 1f1b", "stratified 1f1b, no deferral");
  return r;
}
StrategyResult EntrainNoEager(const StrategyContext& ctx) {
  StrategyResult r = EntrainStrategy(ctx);
  r.plan.strategy = "entrain-noeager";
  r.config = ReplaceAll(r.config, "deferral-aware 1f1b", "deferral-aware 1f1b, no eager slot");
  return r;
}
const StrategyRegistration kNoDeferral({"entrain-nodefer",
                                        "Entrain's plan and stratified microbatches without pairwise deferral", 1040,
                                        EntrainNoDeferral,
                                        [] { return std::make_unique<EntrainScheduler>(EntrainScheduleOptions{false, 1}); },
                                        true});
StrategyResult EntrainZeroBubble(const StrategyContext& ctx) {
  StrategyResult r = EntrainStrategy(ctx);
  r.plan.strategy = "entrain-zb";
  r.config = ReplaceAll(r.config, "deferral-aware 1f1b", "deferral-aware zb-h1");
  return r;
}
const StrategyRegistration kZeroBubble({"entrain-zb",
                                        "Entrain's plan and deferral with zero-bubble backwards (ZB-H1's weight lag)",
                                        1042, EntrainZeroBubble,
                                        [] { return std::make_unique<EntrainScheduler>(EntrainScheduleOptions{true, 1, true}); },
                                        true});
const StrategyRegistration kNoEager({"entrain-noeager", "Entrain without the eager warm-up slot", 1041, EntrainNoEager,
                                     [] { return std::make_unique<EntrainScheduler>(EntrainScheduleOptions{true, 0}); },
                                     true});

}  // namespace
}  // namespace loom
