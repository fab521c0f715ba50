#include "loom/report/config_legend.h"

#include <regex>

namespace loom {

namespace {

struct Notation {
  const char* pattern;  // found in a configuration string (ECMAScript regex)
  const char* notation;
  const char* meaning;
};

// In the order a reader meets them; the meanings are the strategies' own
// (the Describe* functions beside each strategy).
constexpr Notation kNotations[] = {
    {R"(\btp\d)", "tpN", "tensor-parallel degree (GPUs splitting each layer)"},
    {R"(\bpp\d)", "ppN", "pipeline stages, one GPU group each"},
    {R"(\bdp\d)", "dpN", "data-parallel replicas"},
    {R"(\bdp\d+x\d)", "dpRxS",
     "R data-parallel replicas, each microbatch's sequences split over S GPUs of its group (R x S data parallel)"},
    {R"(\bcp\d)", "cpN", "context-parallel degree (GPUs splitting each sequence)"},
    {R"(\bm\d+\b)", "mN", "microbatches per replica per iteration"},
    {R"(\b(1f1b|gpipe|zb-h1)\b)", "1f1b, gpipe, zb-h1", "pipeline schedule"},
    {R"(interleaved\(vpp\d+\))", "interleaved(vppN)", "interleaved 1F1B, N virtual stages per pipeline rank"},
    {R"(deferral-aware)", "deferral-aware 1f1b", "Entrain's 1F1B, LLM work deferred to the next microbatch"},
    {R"(\b(rc|recompute)=)", "rc=none|selective|full", "activation recomputation"},
    {R"(\bzero\d)", "zeroN", "ZeRO stage of the data-parallel replicas (3: weights sharded, FSDP)"},
    {R"(\bfsdp\b)", "fsdp", "weights, gradients and optimizer state sharded over the replicas (ZeRO-3)"},
    {R"(;)", "a; b",
     "units: module groups, each with its own layout, on GPUs of their own or taking turns on shared ones (DistMM, "
     "Optimus)"},
    {R"(\bd\d+ \d+%)", "name dN P%",
     "Spindle, Mosaic: N data-parallel replicas of the module at P% of each GPU's SMs; ',' joins modules sharing "
     "GPUs at once, '|' separates waves run one after another"},
    {R"(:K\d+B\d+)", "name:KnBm",
     "PipeWeaver: the module cut into n pipeline segments, run in sub-microbatches of m sequences"},
    {R"(\bf=\d+)", "f=F k x (ppN on G GPUs, mM)",
     "Oobleck: F node failures survived without a restart; k pipelines of a template of N stages on G GPUs, M "
     "microbatches each"},
    {R"(\bbrokers\b)", "brokers a->b xN",
     "MMScale: a's outputs reach b in N = gcd(DP_a, DP_b) independent scatter groups"},
    {R"(before/after)", "before/after", "Optimus: the encoders run in the backbone's bubbles before and after it"},
    {R"(\bco-?located\b)", "co-located", "the modules share the same GPUs"},
};

}  // namespace

std::vector<std::pair<std::string, std::string>> ConfigLegend(const std::vector<std::string>& configs) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const Notation& n : kNotations) {
    const std::regex re(n.pattern);
    for (const std::string& c : configs) {
      if (std::regex_search(c, re)) {
        out.push_back({n.notation, n.meaning});
        break;
      }
    }
  }
  return out;
}

std::string CutToWidth(const std::string& text, size_t width) {
  if (text.size() <= width || width < 4) return text;
  return text.substr(0, width - 3) + "...";
}

}  // namespace loom
