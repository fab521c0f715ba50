// The single-process reference the runtime's tests compare `loom run` with:
// tiny models and workloads, plain training of the same samples in one
// process (three reduction orders, whose spread bounds the comparison), and
// the comparison of a run's losses and parameters with it. Shared by the
// runtime's test files (tests/runtime/).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include <fmt/format.h>
#include "loom/data/sample_source.h"
#include "loom/plan/plan_json.h"
#include "loom/runtime/torch_model.h"
#include "loom/spec/cluster.h"
#include "loom/spec/model.h"
#include "loom/spec/workload.h"
#include "loom/strategies/plan_builders.h"

#include "test_util.h"

namespace loom::runtime_test {

const std::string kModel = std::string(LOOM_TEST_DATA) + "/runtime/tiny-llm.yaml";
// fp32: the runtime's tests compare with fp32 references (the workloads in
// tests/data/runtime/ say so too); bf16 runs have their own tests.
const std::string kData = "--workload text --global-batch 8 --seq-len 32 --precision fp32";
const std::string kFrozen = std::string(LOOM_TEST_DATA) + "/runtime/tiny-llm-frozen.yaml";
constexpr int kSteps = 3, kMicrobatches = 4;

inline std::pair<int, std::string> LoomCli(const std::string& args) { return test::RunLoom(args); }

const std::string kVlm = std::string(LOOM_TEST_DATA) + "/runtime/tiny-vlm.yaml";
const std::string kVlmFrozen = std::string(LOOM_TEST_DATA) + "/runtime/tiny-vlm-frozen.yaml";
const std::string kVlm2 = std::string(LOOM_TEST_DATA) + "/runtime/tiny-vlm2.yaml";
const std::string kLaion = std::string(LOOM_TEST_DATA) + "/runtime/tiny-laion.yaml";
const std::string kOmni = std::string(LOOM_TEST_DATA) + "/runtime/tiny-omni.yaml";
const std::string kOmniData = std::string(LOOM_TEST_DATA) + "/runtime/tiny-omni-data.yaml";

// A model with its workload: 32-token text samples, or (a workload file)
// image-caption samples of several documents and images each.
struct TinyRun {
  explicit TinyRun(const std::string& path = kModel, const std::string& workload_file = "")
      : model_path(path),
        model(LoadModel(path)),
        data_args(workload_file.empty() ? kData : "--workload " + workload_file) {
    if (workload_file.empty()) {
      workload = LoadWorkload("text");
      workload.global_batch = 8;
      workload.source.seq_len = 32;
      workload.precision = Precision::kFp32;
    } else {
      workload = LoadWorkload(workload_file);
    }
  }
  std::string model_path;
  Model model;
  std::string data_args;
  Cluster cluster = MakeCluster("h100", 1, 2);
  Workload workload;
};

inline std::string MegatronPlanFile(const TinyRun& s, ScheduleKind kind, int vpp, const std::string& name, int tp = 1,
                                    int pp = 2, int dp = 1, const Cluster* cluster = nullptr,
                                    Recompute recompute = Recompute::kNone, int zero_stage = 1, int cp = 1,
                                    CpSplit cp_split = CpSplit::kIdeal) {
  const Batch batch = DrawBatch(s.workload, 0);
  StrategyContext ctx{s.model, cluster ? *cluster : s.cluster, s.workload, batch, {}};
  Plan p =
      SingleUnitPlan(ctx, "megatron", tp, pp, dp, vpp, kMicrobatches, kind, recompute, Balance::kParams, zero_stage);
  p.group_gpus = tp * cp;  // each pipeline rank on tp x cp GPUs
  p.units[0].cp = cp;
  p.units[0].cp_split = cp_split;
  return test::WriteTemp(name, PlanToJson(p).dump());
}

// Per parameter tensor: (sum of squares, sum, sum of absolute values), and in
// the reference the spread of each over reduction orders and how far AdamW
// can move each where a gradient is rounding noise (below); sorted.
using ParamStats = std::vector<std::array<double, 9>>;
constexpr double kLr = 1e-3;

struct Reference {
  std::vector<double> losses;
  std::vector<double> grad_norms;  // per step, before clipping
  ParamStats params;
};

// Plain training in one process. `order` 0: the batch's samples in
// kMicrobatches consecutive microbatches; 1: the same microbatches last to
// first; 2: one sample per microbatch. The loss is the batch's token mean
// whatever the grouping, so the three differ only in the order of fp32 sums.
// Returns per tensor: sum of squares, sum, sum of |w|, how many of its
// elements' gradients were rounding noise summed over steps (below), the
// largest |w|.
inline std::map<std::string, std::array<double, 5>> Train(const TinyRun& s, int order, std::vector<double>* losses,
                                                          std::vector<double>* grad_norms = nullptr) {
  std::vector<LayerRange> all;
  for (const auto& m : s.model.modules) all.push_back({m.name, 0, static_cast<int>(m.layers.size())});
  runtime::LayerStack stack(s.model, all, s.workload.seed);
  // `loom run`'s defaults (runtime/training_options.h): AdamW's decay 0.01 on
  // tensors of two or more dimensions only, gradients clipped to norm 1.
  std::vector<torch::Tensor> decayed, plain;
  for (const auto& p : stack->parameters()) (p.dim() >= 2 ? decayed : plain).push_back(p);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decayed,
                      std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(kLr).weight_decay(0.01)));
  groups.emplace_back(plain,
                      std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(kLr).weight_decay(0)));
  torch::optim::AdamW opt(groups, torch::optim::AdamWOptions(kLr));
  const int loss_module = static_cast<int>(s.model.modules.size()) - 1;
  // Towers no module reads train on their surrogate loss (runtime TowerLoss).
  std::vector<bool> read(s.model.modules.size(), false);
  for (const auto& m : s.model.modules) {
    for (int p : m.inputs) read[p] = true;
  }
  std::map<std::string, double> noisy;
  for (int step = 0; step < kSteps; ++step) {
    const Batch batch = DrawBatch(s.workload, step);
    const int G = static_cast<int>(batch.samples.size());
    std::vector<int> everyone(G);
    for (int x = 0; x < G; ++x) everyone[x] = x;
    const runtime::MicrobatchPacking whole = runtime::PackMicrobatch(s.model, batch, everyone);
    const int M = order == 2 ? G : kMicrobatches, per = G / M;
    double total = 0;
    for (int i = 0; i < M; ++i) {
      const int k = order == 1 ? M - 1 - i : i;
      std::vector<int> samples;
      for (int x = k * per; x < (k + 1) * per; ++x) samples.push_back(x);
      const runtime::MicrobatchPacking packing = runtime::PackMicrobatch(s.model, batch, samples);
      const runtime::MicrobatchInput mb{&packing, step, G};
      auto out = stack->forward({}, mb);
      auto loss = runtime::TextLoss(out.at(loss_module), mb, runtime::BatchTextTokens(batch));
      for (int m = 0; m < loss_module; ++m) {
        if (read[m]) continue;
        const int64_t width = runtime::OutputWidth(s.model, m, static_cast<int>(s.model.modules[m].layers.size()) - 1);
        loss = loss + runtime::TowerLoss(out.at(m), static_cast<double>(std::max<int64_t>(1, whole.Tokens(m)) * width));
      }
      loss.backward();
      total += loss.item<double>();
    }
    // A gradient element a hundred thousand times below the step's largest is
    // rounding noise (its exact value is zero or lost to fp32 sums: seen, one
    // element of a ViT LayerNorm bias at 1e-7 of the largest in the first
    // step), and AdamW moves it by about lr whatever its size or sign.
    double largest = 0;
    for (auto& item : stack->named_parameters()) {
      if (item.value().grad().defined()) largest = std::max(largest, item.value().grad().abs().max().item<double>());
    }
    for (auto& item : stack->named_parameters()) {
      const torch::Tensor& g = item.value().grad();
      noisy[item.key()] += g.defined() ? (g.abs() < 1e-5 * largest).sum().item<double>() : 0.0;
    }
    const double norm = torch::nn::utils::clip_grad_norm_(stack->parameters(), 1.0);
    if (grad_norms) grad_norms->push_back(norm);
    opt.step();
    opt.zero_grad();
    if (losses) losses->push_back(total);
  }
  std::map<std::string, std::array<double, 5>> out;
  for (auto& item : stack->named_parameters()) {
    const torch::Tensor& p = item.value();
    out[item.key()] = {p.pow(2).sum().item<double>(), p.sum().item<double>(), p.abs().sum().item<double>(),
                       noisy[item.key()], p.abs().max().item<double>()};
  }
  return out;
}

// The runtime accumulates gradients in its schedule's order, TP and DP sum
// partial results in other orders, and recomputation rebuilds the graph:
// fp32 sums in another order differ in their last bits. Where a gradient is
// itself rounding noise AdamW still moves the weight by about lr, so those
// elements are bounded apart (Train counts them); every other difference is
// measured, not guessed: each statistic's spread over the reference's own
// three reduction orders.
inline Reference TrainInOneProcess(const TinyRun& s) {
  Reference ref;
  const auto base = Train(s, 0, &ref.losses, &ref.grad_norms), reversed = Train(s, 1, nullptr),
             single = Train(s, 2, nullptr);
  for (const auto& [name, v] : base) {
    std::array<double, 9> row{v[0], v[1], v[2], 0, 0, 0, 0, 0, 0};
    for (int i = 0; i < 3; ++i) {
      row[3 + i] = std::max(std::abs(reversed.at(name)[i] - v[i]), std::abs(single.at(name)[i] - v[i]));
    }
    // Each noisy element-step may move an element by up to about lr in either
    // direction in each run (AdamW's bias-corrected first step is exactly
    // lr x sign; later ones near it): 3 lr apart, with room.
    const double apart = 3 * kLr * v[3];
    row[6] = apart * (2 * v[4] + apart);  // sum of squares: |sum (a - b)(a + b)|
    row[7] = apart;                       // sum
    row[8] = apart;                       // sum of |w|
    ref.params.push_back(row);
  }
  std::sort(ref.params.begin(), ref.params.end());
  return ref;
}

// Each statistic may move by 1e-5 of its scale (a loss or a sum of squares its
// own size, a tensor's sum, whose terms cancel, the sum of its absolute
// values), by 4 times its spread over reduction orders, or by what noisy
// gradients allow, whichever is larger. Measured with PyTorch 2.11: every
// comparison in the runtime's tests passes with the spread's factor 0, the
// noisy elements' bound covering what once took 48 times the spread (one
// element of a ViT LayerNorm bias whose first gradient is 1e-7 of the
// largest, under TP 2, CP 2 and fused attention); 4 is margin.
// `noise`: how far AdamW may move it where gradients were rounding noise.
inline void ExpectClose(double got, double want, const std::string& what, double scale = 0, double spread = 0,
                        double noise = 0) {
  EXPECT_NEAR(got, want, std::max({1e-5 * std::max({1.0, std::abs(want), scale}), 4 * spread, noise})) << what;
}

inline ParamStats StatsOf(const nlohmann::json& processes) {
  ParamStats out;
  for (const auto& rank : processes) {
    for (size_t i = 0; i + 2 < rank.size(); i += 3) {
      out.push_back({rank[i + 1].get<double>(), rank[i].get<double>(), rank[i + 2].get<double>(), 0, 0, 0, 0, 0, 0});
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// A run's parameters (`loom run --json`'s "params") are the reference's.
inline void ExpectParamsMatch(const Reference& r, const nlohmann::json& j) {
  const ParamStats got = StatsOf(j["params"]);
  ASSERT_EQ(got.size(), r.params.size());
  for (size_t i = 0; i < got.size(); ++i) {  // matched by sum of squares (distinct per tensor)
    const auto& want = r.params[i];
    ExpectClose(got[i][0], want[0], "parameter sum of squares", 0, want[3], want[6]);
    ExpectClose(got[i][1], want[1], "parameter sum", want[2], want[4], want[7]);
    ExpectClose(got[i][2], want[2], "parameter sum of |w|", 0, want[5], want[8]);
  }
}

// `loom ARGS --steps 3 --timeout 20 --json` ends with the reference's losses
// and parameters (every parameter tensor reported once, by its unit's replica
// 0); `json`: the run's output.
inline void ExpectRunMatches(const Reference& r, const std::string& args, nlohmann::json* json = nullptr) {
  auto [code, out] = LoomCli(args + " --steps 3 --timeout 20 --json");
  ASSERT_EQ(code, 0) << out;
  const auto j = nlohmann::json::parse(out);
  if (json) *json = j;
  ASSERT_EQ(j["losses"].size(), static_cast<size_t>(kSteps));
  for (int i = 0; i < kSteps; ++i) ExpectClose(j["losses"][i].get<double>(), r.losses[i], "loss");
  // The global gradient norm counts each gradient once however many processes hold it.
  ASSERT_EQ(j["grad_norms"].size(), static_cast<size_t>(kSteps));
  for (int i = 0; i < kSteps; ++i) ExpectClose(j["grad_norms"][i].get<double>(), r.grad_norms[i], "gradient norm");
  ExpectParamsMatch(r, j);
}

struct Case {
  const char* name;
  ScheduleKind kind;
  int vpp, pp, dp;
  Recompute recompute = Recompute::kNone;
  int tp = 1;
  int zero_stage = 1;
  int cp = 1;
};

// `loom run` of each case's plan ends with the reference's losses and parameters.
inline void ExpectRunsLikeTheReference(const TinyRun& s, const std::vector<Case>& cases) {
  const Reference r = TrainInOneProcess(s);
  EXPECT_LT(r.losses.back(), r.losses.front());  // the synthetic task is learnable
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string cluster = fmt::format("h100:1x{}", c.tp * c.pp * c.dp * c.cp);
    const Cluster cl = LoadCluster(cluster);
    const std::string plan = MegatronPlanFile(s, c.kind, c.vpp, std::string("run-") + c.name + ".json", c.tp, c.pp,
                                              c.dp, &cl, c.recompute, c.zero_stage, c.cp);
    ExpectRunMatches(r,
                     "run --model " + s.model_path + " --cluster " + cluster + " " + s.data_args + " --plan " + plan);
  }
}

}  // namespace loom::runtime_test
