// Entrain's stratified microbatch assignment (seed 004 §4.5.1, Algorithm 4
// lines 3-6): a replica's samples become K_eff microbatches balanced on
// encoder work, each holding some samples of low LLM work that pairwise
// deferral (deferral.h) can later move.
//   K_eff = min(K, floor(total encoder work / heaviest sample's)): the
//   heaviest sample bounds every microbatch's encoder load from below, so
//   more microbatches than that cannot be balanced.
//   Coarse samples (S_c) are those with LLM work at or above the replica's
//   median, fine (S_f) the rest: the thesis leaves the threshold open; the
//   median gives every microbatch about as many fine samples as coarse.
//   S_c, then S_f, each by descending encoder work, go one by one to the
//   microbatch with the least encoder work (ties: the lower index). Graham's
//   list-scheduling bound holds: max load <= (2 - 1/K_eff) x optimum.
// Microbatches may hold different numbers of samples. Plain value types.
#pragma once

#include <vector>

namespace loom {

struct SampleWork {
  double encoder = 0;  // the merged encoder's work (seconds or any unit)
  double llm = 0;      // the LLM's work for this sample
};

struct StratifiedMicrobatches {
  int k_eff = 0;
  std::vector<std::vector<int>> microbatches;  // sample indices, in assignment order
  std::vector<double> encoder_load;            // per microbatch
};

// Throws loom::Error for k < 1, no samples, or negative work.
StratifiedMicrobatches StratifiedAssignment(const std::vector<SampleWork>& samples, int k);

}  // namespace loom
