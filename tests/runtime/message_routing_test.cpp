// What the runtime's messages carry across a broker edge (runtime/
// message_routing.h, StepPackings::Carries; runtime/mailbox.h CarriedRows and
// SpreadRows), against what the simulator prices for it (StageEdge::share):
// units of different data-parallel degrees (MMScale's disaggregated encoder
// and backbone) exchange each sample once, a producer replica sending each
// consuming replica only that replica's samples and taking back only their
// gradients. Before, every consuming replica received the producer's whole
// output (Dv / Du outputs' worth of bytes where the simulator priced one).
// In one process: the messages are cut and spread as Send, Receive and the
// backward's gradient lookup do, without c10d.
#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "loom/data/sample_source.h"
#include "loom/plan/compile_plan.h"
#include "loom/runtime/mailbox.h"
#include "loom/runtime/message_routing.h"
#include "loom/runtime/process_layout.h"
#include "loom/runtime/tensor_buckets.h"
#include "loom/spec/cluster.h"
#include "loom/spec/model.h"
#include "loom/spec/workload.h"
#include "loom/strategies/plan_builders.h"
#include "loom/strategies/strategy.h"

namespace loom::runtime {
namespace {

const std::string kBrokerVlm = std::string(LOOM_TEST_DATA) + "/runtime/tiny-vlm.yaml";
const std::string kBrokerVlm2 = std::string(LOOM_TEST_DATA) + "/runtime/tiny-vlm2.yaml";
const std::string kBrokerLaion = std::string(LOOM_TEST_DATA) + "/runtime/tiny-laion.yaml";

// Every sample of stage v's microbatches (one content: the plans here are not replicated).
std::set<int> SamplesOfStage(const ExecutionPlan& exec, int v) {
  std::set<int> out;
  for (const auto& mb : exec.replicas[0][v]) {
    for (const auto& piece : mb.pieces) out.insert(piece.sample);
  }
  return out;
}

// The producer stage's handed tensors for one microbatch, each row holding
// the number of the sample it belongs to (so a message's rows say whose they are).
std::vector<torch::Tensor> TaggedOutputs(const MicrobatchPacking& packing, const std::vector<BoundaryTensor>& handed) {
  std::vector<torch::Tensor> out;
  for (const auto& b : handed) {
    std::vector<float> rows;
    for (const auto& s : packing.modules[b.module]) {
      rows.insert(rows.end(), static_cast<size_t>(s.tokens), static_cast<float>(s.sample));
    }
    const auto n = static_cast<int64_t>(rows.size());
    out.push_back(torch::tensor(rows).view({1, n, 1}).expand({1, n, b.width}).contiguous());
  }
  return out;
}

// Checks every cross-unit edge of `exec` as both of its ends see it:
//   - the message from producer (stage, microbatch) to a consumer replica
//     carries exactly the producer's samples that replica holds, in the
//     producer's packing order, the same on the sending and the receiving end;
//   - their count is StageEdge::share of the producer's samples, the share the
//     simulator prices the send at (when the global microbatch divides evenly
//     over both units' replicas, as here);
//   - over every consumer a producer microbatch feeds, the bytes sent add up
//     to one output (each sample crosses once), and the gradients spread back
//     add up to the whole output's rows.
// Returns the number of edges that scatter (share < 1).
int CheckBrokerMessages(const Model& model, const Batch& batch, const ExecutionPlan& exec, bool shares_exact) {
  const Schedule& sch = exec.schedule;
  const auto handed = StageOutputs(model, exec);
  int scattering = 0;
  // (producer stage, microbatch) -> values sent over all consumers, and the gradient spread back.
  std::map<std::pair<int, int>, int64_t> sent;
  std::map<std::pair<int, int>, torch::Tensor> gradient;
  std::map<std::pair<int, int>, torch::Tensor> whole;
  for (const StageEdge& e : sch.edges) {
    if (exec.stages[e.from].unit == exec.stages[e.to].unit) continue;
    SCOPED_TRACE(::testing::Message() << exec.stages[e.from].label << " (stage " << e.from << ") -> "
                                      << exec.stages[e.to].label << " (stage " << e.to << "), share " << e.share);
    scattering += e.share < 1;
    const ProcessPlace producer = PlaceProcess(exec, exec.ranks[sch.stage_rank[e.from]].group * exec.group_gpus);
    const ProcessPlace consumer = PlaceProcess(exec, exec.ranks[sch.stage_rank[e.to]].group * exec.group_gpus);
    StepPackings sending(model, batch, exec, producer), receiving(model, batch, exec, consumer);
    const std::set<int> reads = SamplesOfStage(exec, e.to);
    for (int j = 0; j < sch.microbatches_of(e.from); ++j) {
      for (int c : Consumers(e, j, sch.microbatches_of(e.to))) {
        const Transfer t{e.from, e.to, j, c, true};
        const auto partners = Partners(t, /*sends=*/true, producer, sending);
        if (partners.size() != 1) {  // one GPU per group here
          ADD_FAILURE() << "microbatch " << j << " has " << partners.size() << " partners";
          continue;
        }
        const Partner& p = partners[0];
        const Carried& carried = sending.Carries(e.from, j, p.producer_part, e.to, p.consumer_part);
        const Carried& heard = receiving.Carries(e.from, j, p.producer_part, e.to, p.consumer_part);
        const MicrobatchPacking& all = sending.At(e.from, j, p.producer_part);
        std::set<int> own, expected;
        for (const auto& piece : sending.PiecesOf(e.from, j, p.producer_part)) own.insert(piece.sample);
        for (int x : own) {
          if (reads.count(x)) expected.insert(x);
        }
        // The sequences carried: the producer's of the consumer's samples, in order, on both ends.
        for (size_t m = 0; m < all.modules.size(); ++m) {
          std::vector<std::pair<int, int64_t>> want, got, got_there;
          for (const auto& s : all.modules[m]) {
            if (expected.count(s.sample)) want.push_back({s.sample, s.tokens});
          }
          for (const auto& s : carried.packing->modules[m]) got.push_back({s.sample, s.tokens});
          for (const auto& s : heard.packing->modules[m]) got_there.push_back({s.sample, s.tokens});
          EXPECT_EQ(got, want) << "module " << model.modules[m].name << " microbatch " << j;
          EXPECT_EQ(got_there, want) << "module " << model.modules[m].name << " microbatch " << j;
        }
        // The simulator's share of the output, in samples.
        if (shares_exact) {
          EXPECT_DOUBLE_EQ(static_cast<double>(expected.size()) / static_cast<double>(own.size()), e.share)
              << "microbatch " << j;
        }
        EXPECT_EQ(carried.whole, expected.size() == own.size());
        // The bytes: what Send flattens, and the gradient HandedGradients spreads back.
        const auto outputs = TaggedOutputs(all, handed[e.from]);
        const std::vector<torch::Tensor> rows = carried.whole ? outputs : CarriedRows(outputs, handed[e.from], carried);
        const torch::Tensor flat = Flatten(rows);
        int64_t want_values = 0;
        for (size_t i = 0; i < rows.size(); ++i) {
          want_values += carried.packing->Tokens(handed[e.from][i].module) * handed[e.from][i].width;
          const torch::Tensor r = rows[i].contiguous();
          for (int64_t x = 0; x < r.numel(); ++x) {
            const int sample = static_cast<int>(r.data_ptr<float>()[x]);
            EXPECT_TRUE(expected.count(sample)) << "a row of sample " << sample << ", which the consumer never reads";
          }
        }
        EXPECT_EQ(flat.numel(), want_values);
        if (e.share < 1) EXPECT_LT(flat.numel(), Flatten(outputs).numel());  // before: the whole output
        const std::vector<torch::Tensor> back =
            carried.whole ? SplitLike(flat, outputs) : SpreadRows(flat, outputs, handed[e.from], carried);
        const std::pair<int, int> key{e.from, j};
        sent[key] += flat.numel();
        whole[key] = Flatten(outputs);
        gradient[key] = gradient[key].defined() ? gradient[key] + Flatten(back) : Flatten(back);
      }
    }
  }
  for (const auto& [key, values] : sent) {
    SCOPED_TRACE(::testing::Message() << "stage " << key.first << " microbatch " << key.second);
    EXPECT_EQ(values, whole.at(key).numel());                    // each sample crosses once
    EXPECT_TRUE(torch::equal(gradient.at(key), whole.at(key)));  // every row comes back once, from its reader
  }
  return scattering;
}

struct Disaggregated {
  Model model = LoadModel(kBrokerVlm);
  Workload workload = LoadWorkload(kBrokerLaion);  // global batch 8
  Cluster cluster = MakeCluster("h100", 1, 8);
  Batch batch = DrawBatch(workload, 0);
  StrategyContext ctx() const { return {model, cluster, workload, batch, {}}; }
};

// An encoder unit of du replicas feeding an LLM unit of dv, m global
// microbatches of 8 / m samples (both degrees dividing them), as
// MMScale's allocation builds it (mmscale.cpp AllocationPlan).
TEST(BrokerMessages, EachConsumingReplicaReceivesItsShareOfTheProducersOutput) {
  const Disaggregated d;
  for (const auto& [du, dv, m] : std::vector<std::tuple<int, int, int>>{{1, 2, 4}, {2, 4, 2}, {2, 1, 4}, {1, 4, 2}}) {
    SCOPED_TRACE(::testing::Message() << "encoder dp " << du << ", llm dp " << dv << ", " << m << " microbatches");
    Plan p = EmptyPlan(d.ctx(), "mmscale", 1);
    p.units.push_back(MakeUnit(d.ctx(), "encoder", {"vision", "projector"}, 0, 1, 0, du, 1, m, ScheduleKind::kOneFOneB,
                               Recompute::kNone, Balance::kParams));
    p.units.push_back(MakeUnit(d.ctx(), "llm", {"llm"}, du, 1, 0, dv, 1, m, ScheduleKind::kOneFOneB, Recompute::kNone,
                               Balance::kParams));
    p.brokers.push_back({"encoder", "llm", std::gcd(du, dv)});
    const ExecutionPlan exec = CompilePlan(d.model, d.cluster, d.workload, p, d.batch);
    const int scattering = CheckBrokerMessages(d.model, d.batch, exec, /*shares_exact=*/true);
    EXPECT_EQ(scattering > 0, dv > du);  // a producer replica feeds several consumers only then
  }
}

// MMScale's own plan of the two-encoder model on 3 GPUs (encoder dp 1, backbone
// dp 2: the runtime test strategies_test.cpp trains it against one process).
TEST(BrokerMessages, MmscalesPlanSendsEachSampleOnce) {
  const Model model = LoadModel(kBrokerVlm2);
  const Workload workload = LoadWorkload(kBrokerLaion);
  const Cluster cluster = LoadCluster("h100:1x3");
  const Batch batch = DrawBatch(workload, 0);
  const Plan plan = RunStrategy("mmscale", StrategyContext{model, cluster, workload, batch, {}}).plan;
  ASSERT_GT(plan.units.size(), 1u);
  ASSERT_EQ(plan.group_gpus, 1);  // TP 1: one process per group, one message per transfer
  const ExecutionPlan exec = CompilePlan(model, cluster, workload, plan, batch);
  bool exact = true;  // every unit's degree divides the samples of a global microbatch
  const int per = static_cast<int>(plan.global_batch / plan.units[0].pipelines[0].microbatches);
  for (const Unit& u : plan.units) exact = exact && per % u.num_replicas() == 0;
  EXPECT_GT(CheckBrokerMessages(model, batch, exec, exact), 0) << "each encoder replica feeds several LLM replicas";
}

}  // namespace
}  // namespace loom::runtime
