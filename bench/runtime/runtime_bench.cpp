// Runtime overhead (issue 14's speed goal: under 2%): one training step of a
// one-rank plan run by `loom run` (the worker walking the ExecutionPlan's
// actions, with its Gloo process group) against the same layers trained in a
// bare libtorch loop in this process, same machine, same run. The runtime's
// time is its workers' own step time (process start-up excluded), the mean of
// steps 2..N; both use the same model, batch and microbatches, and one
// intra-op thread (`loom run`'s default per rank).
//   build/loom_runtime_bench
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "loom/data/sample_source.h"
#include "loom/plan/compile_plan.h"
#include "loom/plan/plan_json.h"
#include "loom/runtime/bitfield_attention.h"
#include "loom/runtime/fused_adamw.h"
#include "loom/runtime/process_layout.h"
#include "loom/runtime/torch_model.h"
#include "loom/spec/cluster.h"
#include "loom/strategies/plan_builders.h"
#include "loom/strategies/strategy.h"

namespace loom {
namespace {

const std::string kModel = std::string(LOOM_BENCH_DATA) + "/runtime/tiny-llm.yaml";
constexpr int kMicrobatches = 4, kSteps = 6;

Workload BenchWorkload() {
  Workload w = LoadWorkload("text");
  w.global_batch = 16;
  w.source.seq_len = 256;
  return w;
}

// A command's standard output; a command that fails stops the benchmark, naming it.
std::string Capture(const std::string& cmd) {
  FILE* pipe = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), pipe)) out.append(buf.data(), n);
  if (pclose(pipe) != 0) throw std::runtime_error(cmd + " failed:\n" + out);
  return out;
}

// `loom run` on a one-rank plan; the iteration time is the workers' mean step time.
void BM_RuntimeStep(benchmark::State& state) {
  const Model model = LoadModel(kModel);
  const Cluster cluster = MakeCluster("h100", 1, 1);
  const Workload w = BenchWorkload();
  const Batch batch = DrawBatch(w, 0);
  StrategyContext ctx{model, cluster, w, batch, {}};
  const Plan plan = SingleUnitPlan(ctx, "megatron", 1, 1, 1, 1, kMicrobatches, ScheduleKind::kOneFOneB,
                                   Recompute::kNone, Balance::kParams, 1);
  const std::string path = "/tmp/loom_runtime_bench_plan.json";
  if (FILE* f = std::fopen(path.c_str(), "w")) {
    std::fputs(PlanToJson(plan).dump().c_str(), f);
    std::fclose(f);
  }
  const std::string cmd = std::string(LOOM_BINARY) + " run --model " + kModel +
                          " --cluster h100:1x1 --workload text --global-batch 16 --seq-len 256 --plan " + path +
                          " --steps " + std::to_string(kSteps) + " --threads 1 --json 2>&1";
  for (auto _ : state) {
    const auto j = nlohmann::json::parse(Capture(cmd));
    double sum = 0;
    for (int s = 1; s < kSteps; ++s) sum += j["step_s"][0][s].get<double>();
    state.SetIterationTime(sum / (kSteps - 1));
  }
}
BENCHMARK(BM_RuntimeStep)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(3);

// What a worker recomputes every step before its clock starts, for a process
// running two ranks (DistMM: an encoder branch and a backbone replica on one
// GPU): the merged order of their actions (a topological sort of the whole
// schedule) and what each stage hands on. Arg: GPUs (the plan's size grows with them).
void BM_ProcessOrderOfPhases(benchmark::State& state) {
  const int gpus = static_cast<int>(state.range(0));
  const Model model = LoadModel(std::string(LOOM_BENCH_DATA) + "/runtime/tiny-vlm2.yaml");
  Workload w = LoadWorkload(std::string(LOOM_BENCH_DATA) + "/runtime/tiny-laion.yaml");
  w.global_batch = 8L * gpus;
  const Cluster cluster = MakeCluster("h100", 1, gpus);
  const Batch batch = DrawBatch(w, 0);
  const Plan plan = RunStrategy("distmm", StrategyContext{model, cluster, w, batch, {}}).plan;
  const ExecutionPlan exec = CompilePlan(model, cluster, w, plan, batch);
  const runtime::ProcessLayout layout = runtime::LayoutProcesses(exec);
  std::vector<int> ranks;
  for (const auto& c : layout.of_group[0]) ranks.push_back(c.rank);
  for (auto _ : state) {
    benchmark::DoNotOptimize(runtime::ProcessOrder(exec, ranks));
    benchmark::DoNotOptimize(runtime::StageOutputs(model, exec));
  }
  state.counters["actions"] = exec.schedule.num_actions();
  state.counters["ranks_here"] = static_cast<double>(ranks.size());
}
BENCHMARK(BM_ProcessOrderOfPhases)->Arg(2)->Arg(8)->Arg(16)->Unit(benchmark::kMillisecond);

// The same step in a bare libtorch loop: forward, loss, backward per microbatch, AdamW.
void BM_BareLibtorchStep(benchmark::State& state) {
  const Model model = LoadModel(kModel);
  const Workload w = BenchWorkload();
  std::vector<LayerRange> all{{"llm", 0, static_cast<int>(model.modules[0].layers.size())}};
  torch::set_num_threads(1);  // as each `loom run` rank above
  runtime::LayerStack stack(model, all, w.seed);
  runtime::FusedAdamW opt({{stack->parameters(), 0.01}});  // the runtime's optimizer, so only the executor differs
  const Batch batch = DrawBatch(w, 0);
  const int G = static_cast<int>(batch.samples.size()), per = G / kMicrobatches;
  std::vector<runtime::MicrobatchPacking> packings;
  for (int k = 0; k < kMicrobatches; ++k) {
    std::vector<int> samples;
    for (int x = k * per; x < (k + 1) * per; ++x) samples.push_back(x);
    packings.push_back(runtime::PackMicrobatch(model, batch, samples));
  }
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int k = 0; k < kMicrobatches; ++k) {
      const runtime::MicrobatchInput mb{&packings[k], 0, G};
      auto out = stack->forward({}, mb);
      auto loss = runtime::TextLoss(out.at(0), mb, runtime::BatchTextTokens(batch));
      loss.backward();
    }
    opt.Step(1e-3);
    opt.ZeroGrad();
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
}
BENCHMARK(BM_BareLibtorchStep)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(5);

// The runtime's AdamW (ATen's fused kernel, runtime/fused_adamw.h) against
// libtorch's torch::optim::AdamW (about nine kernels per tensor), over
// tiny-llm's parameters with random gradients, alternating in one run; the
// time reported is the fused step's, the ratio a counter. One intra-op thread.
void BM_AdamWStepVsLibtorch(benchmark::State& state) {
  const Model model = LoadModel(kModel);
  std::vector<LayerRange> all{{"llm", 0, static_cast<int>(model.modules[0].layers.size())}};
  torch::set_num_threads(1);
  runtime::LayerStack ours(model, all, 1), theirs(model, all, 1);
  runtime::FusedAdamW fused({{ours->parameters(), 0.01}});
  torch::optim::AdamW libtorch(theirs->parameters(), torch::optim::AdamWOptions(1e-3).weight_decay(0.01));
  auto with_gradients = [](const std::vector<torch::Tensor>& params) {
    for (auto p : params) p.mutable_grad() = torch::randn_like(p);
  };
  double fused_s = 0, libtorch_s = 0;
  for (auto _ : state) {
    with_gradients(ours->parameters());
    auto t0 = std::chrono::steady_clock::now();
    fused.Step(1e-3);
    const double f = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    with_gradients(theirs->parameters());
    t0 = std::chrono::steady_clock::now();
    libtorch.step();
    libtorch_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    fused_s += f;
    state.SetIterationTime(f);
  }
  state.counters["libtorch_ms"] = libtorch_s * 1e3 / static_cast<double>(state.iterations());
  state.counters["fused_over_libtorch"] = fused_s / libtorch_s;
}
BENCHMARK(BM_AdamWStepVsLibtorch)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(20);

// The median of a run's step times after its first two (which allocate).
double MedianAfterWarmUp(const nlohmann::json& step_s) {
  std::vector<double> t;
  for (size_t s = 2; s < step_s.size(); ++s) t.push_back(step_s[s].get<double>());
  std::sort(t.begin(), t.end());
  return t.at(t.size() / 2);
}

// Issue 41's speed goal (at most 1.0x): `loom run` training a tiny Llama
// saved by transformers, on its tokenized samples, against transformers'
// eager training step on the same model and samples
// (bench/runtime/hf_llama_step.py: fp32, SDPA, torch.optim.AdamW), same
// machine, same run, the same intra-op threads and microbatches. Each side's
// time is the median of its steps 3..N (the first steps allocate); the time
// reported is Loom's, with transformers' and the ratio as counters.
// range(0): intra-op threads.
void BM_LoomStepVsTransformers(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  constexpr int kStepsEach = 7;
  const std::string dir = "/tmp/loom_bench_hf_llama";
  const std::string script = std::string(LOOM_BENCH_DIR) + "/runtime/hf_llama_step.py";
  const std::string python = LOOM_PYTHON_EXE;
  Capture("rm -rf " + dir + " && " + python + " " + script + " make " + dir + " 16 256 2>&1");
  const std::string loom = std::string(LOOM_BINARY) + " run --model " + dir + " --data " + dir +
                           "/data.jsonl --global-batch 16 --microbatches 4 --cluster h100:1x1 --precision fp32 "
                           "--lr 1e-4 --steps " +
                           std::to_string(kStepsEach) + " --threads " + std::to_string(threads) + " --json 2>/dev/null";
  const std::string hf = python + " " + script + " step " + dir + " " + std::to_string(kStepsEach) + " 4 " +
                         std::to_string(threads) + " 2>/dev/null";
  double loom_s = 0, hf_s = 0;
  for (auto _ : state) {
    const nlohmann::json l = nlohmann::json::parse(Capture(loom));
    const std::string h = Capture(hf);
    const nlohmann::json t = nlohmann::json::parse(h.substr(h.rfind('{')));
    loom_s = MedianAfterWarmUp(l["step_s"][0]);
    hf_s = MedianAfterWarmUp(t["step_s"]);
    state.SetIterationTime(loom_s);
  }
  state.counters["transformers_ms"] = hf_s * 1e3;
  state.counters["loom_over_transformers"] = loom_s / hf_s;
}
BENCHMARK(BM_LoomStepVsTransformers)->Arg(1)->Arg(2)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(1);

// Cornstarch's bitfield attention on this machine's CPU, forward and
// backward: the dense reference (the T x T mask, MayAttend on the host)
// against the blocked path (128-token blocks, only the non-empty KV blocks,
// the rule evaluated beside the matmuls), on a packed row of documents of
// 512 tokens, each with a 128-token image amid its text. range(0): tokens,
// range(1): 1 blocked, 0 dense; 4 heads of 32.
void BM_BitfieldAttention(benchmark::State& state) {
  const int64_t T = state.range(0);
  std::vector<MaskSegment> segments;
  for (int doc = 0; static_cast<int64_t>(doc) * 512 < T; ++doc) {
    segments.push_back({192, -1, doc});
    segments.push_back({128, 0, doc});
    segments.push_back({192, -1, doc});
  }
  const BitfieldMask mask = BuildMask(segments, MaskLayout::kPacked);
  torch::manual_seed(0);
  auto make = [&] { return torch::randn({1, T, 4, 32}).requires_grad_(true); };
  const torch::Tensor q = make(), k = make(), v = make();
  for (auto _ : state) {
    const torch::Tensor o = state.range(1) ? runtime::BitfieldAttention(q, k, v, mask, 128)
                                           : runtime::BitfieldAttentionReference(q, k, v, mask);
    o.sum().backward();
  }
}
BENCHMARK(BM_BitfieldAttention)->ArgsProduct({{1024, 4096}, {0, 1}})->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace
}  // namespace loom
