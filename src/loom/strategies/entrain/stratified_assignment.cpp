#include "loom/strategies/entrain/stratified_assignment.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "loom/error.h"

namespace loom {

StratifiedMicrobatches StratifiedAssignment(const std::vector<SampleWork>& samples, int k) {
  if (k < 1 || samples.empty()) {
    throw Error(
        fmt::format("entrain: {} samples into {} microbatches; valid: at least one sample, k >= 1", samples.size(), k));
  }
  double total = 0, heaviest = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    if (samples[i].encoder < 0 || samples[i].llm < 0) {
      throw Error(fmt::format("entrain: sample {} has work encoder {} llm {}; valid: >= 0", i, samples[i].encoder,
                              samples[i].llm));
    }
    total += samples[i].encoder;
    heaviest = std::max(heaviest, samples[i].encoder);
  }
  StratifiedMicrobatches out;
  // Algorithm 4 line 3; at least one, at most one per sample.
  const int bound = heaviest > 0 ? static_cast<int>(std::floor(total / heaviest + 1e-9)) : k;
  out.k_eff = std::max(1, std::min({k, bound, static_cast<int>(samples.size())}));
  // Line 4: coarse at or above the median LLM work.
  std::vector<double> llm;
  for (const auto& s : samples) llm.push_back(s.llm);
  std::vector<double> sorted = llm;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[(sorted.size() - 1) / 2];
  std::vector<int> coarse, fine;
  for (size_t i = 0; i < samples.size(); ++i) (llm[i] >= median ? coarse : fine).push_back(static_cast<int>(i));
  // Line 5: each stratum by descending encoder work (ties: the lower index).
  auto by_encoder = [&](int a, int b) {
    return samples[a].encoder != samples[b].encoder ? samples[a].encoder > samples[b].encoder : a < b;
  };
  std::sort(coarse.begin(), coarse.end(), by_encoder);
  std::sort(fine.begin(), fine.end(), by_encoder);
  // Line 6: min-max greedy, coarse first.
  out.microbatches.assign(out.k_eff, {});
  out.encoder_load.assign(out.k_eff, 0.0);
  for (const auto* stratum : {&coarse, &fine}) {
    for (int i : *stratum) {
      const int to = static_cast<int>(std::min_element(out.encoder_load.begin(), out.encoder_load.end()) -
                                      out.encoder_load.begin());
      out.microbatches[to].push_back(i);
      out.encoder_load[to] += samples[i].encoder;
    }
  }
  return out;
}

}  // namespace loom
