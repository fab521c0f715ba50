#include "loom/runtime/optimizer_steps.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "loom/error.h"
#include "loom/runtime/training_state.h"

namespace loom::runtime {

std::vector<Tie> MakeTies(const Model& model, const ExecutionPlan& exec, const ProcessPlace& place,
                          const LocalStages& local, const GroupMaker& maker) {
  std::vector<Tie> ties;
  const Module& lm = model.modules.back();
  std::map<std::pair<int, int>, Tie> by_replica;  // (unit, replica) -> its stages
  for (int v = 0; v < place.stages(); ++v) {
    for (const auto& r : exec.stages[v].layers) {
      if (r.module != lm.name) continue;
      Tie& t = by_replica[{exec.stages[v].unit, exec.stages[v].replica}];
      if (r.begin == 0) t.embedding_stage = v;
      if (r.end == static_cast<int>(lm.layers.size())) t.head_stage = v;
    }
  }
  if (lm.layers.back().kind != LayerKind::kLmHead || !lm.layers.back().tied || lm.layers[0].frozen) return ties;
  for (auto& [key, t] : by_replica) {
    if (t.embedding_stage < 0 || t.head_stage < 0 || t.embedding_stage == t.head_stage) continue;
    const int pe = place.ProcessOf(place.stage_rank[t.embedding_stage]);
    const int ph = place.ProcessOf(place.stage_rank[t.head_stage]);
    if (pe != place.process && ph != place.process) continue;
    if (pe == place.process) t.tensors.push_back(local.stacks.at(t.embedding_stage)->EmbeddingTable());
    if (ph == place.process) t.tensors.push_back(local.stacks.at(t.head_stage)->TiedHeadCopy());
    if (pe != ph) {
      t.group = maker.Make(fmt::format("tie{}.{}.{}.{}", t.embedding_stage, t.head_stage, place.replica, place.shard),
                           pe == place.process ? 0 : 1, 2);
    }
    ties.push_back(std::move(t));
  }
  return ties;
}

bool HoldsTied(const std::vector<Tie>& ties, const LocalStages& local, int v) {
  for (const auto& t : ties) {
    for (const auto& tensor : t.tensors) {
      for (const auto& p : local.stacks.at(v)->parameters()) {
        if (p.is_same(tensor)) return true;
      }
    }
  }
  return false;
}

std::vector<Segment> MakeSegments(const Model& model, const ExecutionPlan& exec, const ProcessPlace& place,
                                  const LocalStages& local, const GroupMaker& maker) {
  std::vector<Segment> segments;
  std::map<std::pair<int, int>, int> segment_of;  // (module, layer) -> index into segments
  for (const CommGroup& cg : exec.groups) {
    if (cg.kind != GroupKind::kLayerSegment) continue;
    const int k = static_cast<int>(segments.size());
    segments.emplace_back();
    for (const auto& r : cg.layers) {
      for (int l = r.begin; l < r.end; ++l) segment_of[{model.FindModule(r.module), l}] = k;
    }
    std::vector<int> members;  // every process of its GPU groups holds a copy
    for (int g : cg.gpu_groups) {
      for (int x = 0; x < place.group_gpus; ++x) members.push_back(g * place.group_gpus + x);
    }
    const auto at = std::find(members.begin(), members.end(), place.process);
    if (at == members.end() || members.size() < 2) continue;
    segments[k].group = maker.Make(fmt::format("seg{}", cg.id), static_cast<int>(at - members.begin()),
                                   static_cast<int>(members.size()));
  }
  for (const auto& [v, stack] : local.stacks) {
    for (const auto& item : stack->named_parameters()) {
      if (!item.value().requires_grad()) continue;
      segments[segment_of.at(LayerOfParam(model, item.key()))].params.push_back(item.value());
    }
  }
  return segments;
}

OptimizerSteps::OptimizerSteps(const ExecutionPlan& exec, const ProcessPlace& place, LocalStages& local,
                               ZeroShards& zero, std::vector<Tie> ties, std::vector<Segment> segments,
                               double learning_rate, AbortFlag abort)
    : local_(local), zero_(zero), ties_(std::move(ties)), segments_(std::move(segments)), abort_(abort) {
  for (const auto& [v, stack] : local.stacks) {
    stage_rank_[v] = exec.schedule.stage_rank[v];
    dp_group_[v] = exec.stages[v].dp_group;
  }
  for (int r : place.local_ranks) {
    std::vector<torch::Tensor> replicated, masters;
    RankOptimizer& o = optimizers_[r];
    for (const auto& [v, stage_buckets] : local.buckets) {
      if (exec.schedule.stage_rank[v] != r || zero.Sharded(v)) continue;
      for (const auto& bucket : stage_buckets) replicated.insert(replicated.end(), bucket.begin(), bucket.end());
    }
    for (auto& sb : zero.shards()) {
      if (exec.schedule.stage_rank[sb.stage] != r) continue;
      masters.push_back(sb.master);
      o.shards.push_back(&sb);
    }
    const auto options = torch::optim::AdamWOptions(learning_rate);
    if (!replicated.empty()) o.replicated = std::make_unique<torch::optim::AdamW>(replicated, options);
    if (!masters.empty()) o.sharded = std::make_unique<torch::optim::AdamW>(masters, options);
  }
}

void OptimizerSteps::Step(const std::vector<int>& ranks) {
  for (const Tie& t : ties_) {
    torch::NoGradGuard no_grad;
    torch::Tensor sum = torch::zeros_like(t.tensors[0]);
    for (const auto& x : t.tensors) {
      if (x.grad().defined()) sum += x.grad();
    }
    if (t.group) AllReduceSum(*t.group, sum, abort_);
    for (auto x : t.tensors) x.mutable_grad() = sum.clone();
  }
  for (Segment& seg : segments_) {  // Oobleck's layer-wise sync, in model order
    if (!seg.group || seg.params.empty()) continue;
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> grads;
    for (auto& p : seg.params) {
      if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
      grads.push_back(p.grad());
    }
    torch::Tensor flat = Flatten(grads);
    AllReduceSum(*seg.group, flat, abort_);
    const auto parts = SplitLike(flat, seg.params);
    for (size_t i = 0; i < seg.params.size(); ++i) seg.params[i].mutable_grad().copy_(parts[i]);
  }
  std::vector<const ShardedBucket*> gathers;
  for (int r : ranks) {
    RankOptimizer& o = optimizers_.at(r);
    if (o.replicated) {
      o.replicated->step();
      o.replicated->zero_grad();
    }
    if (o.sharded) {
      o.sharded->step();
      o.sharded->zero_grad();
      gathers.insert(gathers.end(), o.shards.begin(), o.shards.end());
    }
  }
  std::stable_sort(gathers.begin(), gathers.end(), [&](const ShardedBucket* a, const ShardedBucket* b) {
    return dp_group_.at(a->stage) < dp_group_.at(b->stage);
  });
  for (const ShardedBucket* sb : gathers) {
    if (zero_.Fsdp(sb->stage)) continue;  // ZeRO-3 gathers at the next use
    zero_.GatherBucket(*sb);
    for (auto& p : local_.buckets.at(sb->stage).at(sb->bucket)) p.mutable_grad() = torch::Tensor();
  }
}

std::vector<std::tuple<std::string, torch::Tensor, torch::optim::AdamW*>> OptimizerSteps::Trainable() {
  std::vector<std::tuple<std::string, torch::Tensor, torch::optim::AdamW*>> out;
  for (auto& [v, stack] : local_.stacks) {
    RankOptimizer& o = optimizers_.at(stage_rank_.at(v));
    for (auto& item : stack->named_parameters()) {
      if (!item.value().requires_grad()) continue;
      if (!o.replicated) {
        throw Error(fmt::format("runtime: parameter {} has no replicated optimizer state to carry", item.key()));
      }
      out.emplace_back(item.key(), item.value(), o.replicated.get());
    }
  }
  return out;
}

}  // namespace loom::runtime
