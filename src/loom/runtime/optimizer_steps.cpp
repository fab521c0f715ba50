#include "loom/runtime/optimizer_steps.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "loom/error.h"
#include "loom/runtime/runnable_plan.h"
#include "loom/runtime/training_state.h"

namespace loom::runtime {

std::vector<Tie> MakeTies(const Model& model, const ExecutionPlan& exec, const ProcessPlace& place,
                          const LocalStages& local, const GroupMaker& maker) {
  std::vector<Tie> ties;
  const Module& lm = model.modules.back();
  if (lm.layers.back().kind != LayerKind::kLmHead || !lm.layers.back().tied || lm.layers[0].frozen) return ties;
  for (const auto& [key, ends] : LossModuleEndsOf(model, exec)) {
    Tie t;
    t.embedding_stage = ends.embedding_stage;
    t.head_stage = ends.head_stage;
    if (t.embedding_stage < 0 || t.head_stage < 0 || t.embedding_stage == t.head_stage) continue;
    const int pe = place.ProcessOf(place.stage_rank[t.embedding_stage]);
    const int ph = place.ProcessOf(place.stage_rank[t.head_stage]);
    if (pe != place.process && ph != place.process) continue;
    if (pe == place.process) t.tensors.push_back(t.embedding = local.stacks.at(t.embedding_stage)->EmbeddingTable());
    if (ph == place.process) t.tensors.push_back(t.head_copy = local.stacks.at(t.head_stage)->TiedHeadCopy());
    if (pe != ph) {
      t.group = maker.Make(fmt::format("tie{}.{}.{}.{}", t.embedding_stage, t.head_stage, place.replica, place.shard),
                           pe == place.process ? 0 : 1, 2);
    }
    ties.push_back(std::move(t));
  }
  return ties;
}

bool IsTiedHeadCopy(const std::string& name) {
  const std::string suffix = ".tied_table";
  return name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
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
  // A tied head's copy of the embedding is left out: pipelines whose head
  // shares the embedding's stage have none, and it takes the embedding's
  // summed gradient after the segments (OptimizerSteps::SumShared).
  for (const auto& [v, stack] : local.stacks) {
    for (const auto& item : stack->named_parameters()) {
      if (!item.value().requires_grad() || IsTiedHeadCopy(item.key())) continue;
      segments[segment_of.at(LayerOfParam(model, item.key()))].params.push_back(item.value());
    }
  }
  return segments;
}

bool StepNorm::Finite() const { return std::isfinite(grad_norm) && std::isfinite(loss); }

namespace {

// AdamW over `params` with weight decay on those of two or more dimensions
// only (two parameter groups; torch.optim.AdamW's defaults otherwise).
std::unique_ptr<FusedAdamW> DecayingAdamW(const std::vector<torch::Tensor>& params, double weight_decay) {
  FusedAdamW::Group decayed{{}, weight_decay}, plain{{}, 0.0};
  for (const auto& p : params) (p.dim() >= 2 ? decayed : plain).params.push_back(p);
  std::vector<FusedAdamW::Group> groups;
  if (!decayed.params.empty()) groups.push_back(std::move(decayed));
  if (!plain.params.empty()) groups.push_back(std::move(plain));
  return std::make_unique<FusedAdamW>(std::move(groups));
}

}  // namespace

OptimizerSteps::OptimizerSteps(const ExecutionPlan& exec, const ProcessPlace& place, LocalStages& local,
                               ZeroShards& zero, std::vector<Tie> ties, std::vector<Segment> segments,
                               const ProcessGroups& groups, const TrainingOptions& training,
                               const torch::Device& device, AbortFlag abort)
    : local_(local),
      zero_(zero),
      ties_(std::move(ties)),
      segments_(std::move(segments)),
      world_(*groups.world),
      weight_decay_(training.weight_decay),
      device_(device),
      abort_(abort) {
  for (const auto& [v, stack] : local.stacks) {
    stage_rank_[v] = exec.schedule.stage_rank[v];
    dp_group_[v] = exec.stages[v].dp_group;
  }
  // How many processes hold an equal copy of each gradient (NormTerm): TP
  // shards of a tensor TP does not split, the stage's data-parallel group
  // (CP ranks and sequence shares included), both copies of a tied matrix,
  // the members of an Oobleck layer segment.
  std::map<const void*, std::string>& name_of = name_of_;
  for (const auto& [v, stack] : local.stacks) {
    for (const auto& item : stack->named_parameters()) name_of[item.value().unsafeGetTensorImpl()] = item.key();
    tp_of_[v] = {place.MyTpRank(v), place.TpOf(v)};
  }
  std::map<const void*, int> extra_copies;
  // With layer segments (Oobleck), the embedding counts once per segment
  // member and a tied head's copy, a duplicate of it, not at all; else each
  // of a tie's two copies counts half.
  for (const Tie& t : ties_) {
    for (const auto& x : t.tensors) extra_copies[x.unsafeGetTensorImpl()] = 2;
    if (!segments_.empty() && t.head_copy.defined()) extra_copies[t.head_copy.unsafeGetTensorImpl()] = 0;
  }
  for (const Segment& seg : segments_) {
    if (!seg.group) continue;
    for (const auto& p : seg.params) extra_copies[p.unsafeGetTensorImpl()] = static_cast<int>(seg.group->getSize());
  }
  auto tp_copies = [&](int v, const torch::Tensor& p) {
    return local.stacks.at(v)->IsSharded(name_of.at(p.unsafeGetTensorImpl())) ? 1 : place.TpOf(v);
  };
  for (const auto& [v, stage_buckets] : local.buckets) {
    if (zero.Sharded(v)) continue;
    const auto dp = groups.dp_place.find(exec.stages[v].dp_group);
    const int dp_copies = dp == groups.dp_place.end() ? 1 : dp->second.second;
    for (const auto& bucket : stage_buckets) {
      for (const auto& p : bucket) {
        const auto extra = extra_copies.find(p.unsafeGetTensorImpl());
        const int copies = dp_copies * tp_copies(v, p) * (extra == extra_copies.end() ? 1 : extra->second);
        if (copies > 0) norm_terms_.push_back({p, 0, -1, 1.0 / copies});
      }
    }
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
      const auto& bucket = local.buckets.at(sb.stage).at(sb.bucket);
      for (const ShardRange& r : ShardRanges(sb, bucket)) {
        const torch::Tensor& p = bucket[r.param];
        const auto extra = extra_copies.find(p.unsafeGetTensorImpl());
        const int copies = tp_copies(sb.stage, p) * (extra == extra_copies.end() ? 1 : extra->second);
        if (copies > 0) norm_terms_.push_back({sb.master, r.at, r.length, 1.0 / copies});
        if (p.dim() >= 2 && weight_decay_ > 0) o.decay.push_back({&sb, r.at, r.length});
      }
    }
    if (!replicated.empty()) o.replicated = DecayingAdamW(replicated, weight_decay_);
    if (!masters.empty()) o.sharded = std::make_unique<FusedAdamW>(std::vector<FusedAdamW::Group>{{masters, 0.0}});
  }
}

void OptimizerSteps::SumShared() {
  for (const Tie& t : ties_) {
    torch::NoGradGuard no_grad;
    torch::Tensor sum = torch::zeros_like(t.tensors[0]);
    for (const auto& x : t.tensors) {
      if (x.grad().defined()) sum += x.grad();
    }
    if (t.group) {
      AllReduceSum(*t.group, sum, abort_);
      AwaitRelease(sum);
    }
    for (auto x : t.tensors) {  // in place where a gradient buffer holds it (gradient_buffers.h)
      if (x.grad().defined()) {
        x.mutable_grad().copy_(sum);
      } else {
        x.mutable_grad() = sum.clone();
      }
    }
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
    AwaitRelease(flat);
    const auto parts = SplitLike(flat, seg.params);
    for (size_t i = 0; i < seg.params.size(); ++i) seg.params[i].mutable_grad().copy_(parts[i]);
  }
  // A tied head's copy, outside the segments, takes the embedding's gradient
  // summed over every pipeline (the embedding's segment held each
  // pipeline's embedding-plus-head sum).
  if (segments_.empty()) return;
  for (const Tie& t : ties_) {
    if (!t.head_copy.defined() && !t.group) continue;
    torch::NoGradGuard no_grad;
    torch::Tensor sum = t.embedding.defined() && t.embedding.grad().defined() ? t.embedding.grad().clone()
                                                                              : torch::zeros_like(t.tensors[0]);
    if (t.group) {
      AllReduceSum(*t.group, sum, abort_);
      AwaitRelease(sum);
    }
    if (t.head_copy.defined()) t.head_copy.mutable_grad() = sum;
  }
}

StepNorm OptimizerSteps::Norm(double loss_share, bool stop) {
  torch::NoGradGuard no_grad;
  // Each term's norm in fp32 (as clip_grad_norm_ takes them), squared and
  // weighted in fp64, summed with the other processes' in fp64.
  std::vector<torch::Tensor> grads;
  std::vector<double> scales;
  for (const NormTerm& t : norm_terms_) {
    const torch::Tensor& g = t.param.grad();
    if (!g.defined()) continue;
    grads.push_back(t.length < 0 ? g : g.narrow(0, t.offset, t.length));
    scales.push_back(t.scale);
  }
  const auto options = torch::TensorOptions().device(device_).dtype(torch::kDouble);
  torch::Tensor sums = torch::zeros({3}, options);
  if (!grads.empty()) {  // one fused kernel over every tensor (clip_grad_norm_'s foreach path)
    const torch::Tensor n = torch::stack(at::_foreach_norm(grads, 2)).to(torch::kDouble);
    sums[0] = (n * n * torch::tensor(scales, torch::kDouble).to(device_)).sum();
  }
  sums[1] = loss_share;
  sums[2] = stop ? 1.0 : 0.0;
  AllReduceSum(world_, sums, abort_);
  AwaitRelease(sums);  // freed on this thread, where the tensor-memory count sees it
  const torch::Tensor host = sums.cpu();
  return {std::sqrt(host[0].item<double>()), host[1].item<double>(), host[2].item<double>() > 0};
}

std::vector<torch::Tensor> OptimizerSteps::GradientsRead() const {
  std::vector<torch::Tensor> grads;
  for (const auto& [v, stack] : local_.stacks) {
    if (zero_.Sharded(v)) continue;
    for (const auto& p : stack->parameters()) {
      if (p.grad().defined()) grads.push_back(p.grad());
    }
  }
  for (const auto& sb : zero_.shards()) {
    if (sb.master.grad().defined()) grads.push_back(sb.master.grad());
  }
  return grads;
}

void OptimizerSteps::Clip(double grad_norm, double clip) {
  if (!(clip > 0)) return;
  const double coef = clip / (grad_norm + 1e-6);
  if (coef >= 1) return;
  torch::NoGradGuard no_grad;
  const std::vector<torch::Tensor> grads = GradientsRead();
  if (!grads.empty()) at::_foreach_mul_(grads, coef);
}

void OptimizerSteps::Step(const std::vector<int>& ranks, double lr, GradientBuffers* buffers) {
  std::vector<const ShardedBucket*> gathers;
  for (int r : ranks) {
    RankOptimizer& o = optimizers_.at(r);
    if (o.replicated) {
      o.replicated->Step(lr);
      o.replicated->ZeroGrad();
    }
    if (o.sharded) {
      // AdamW's decoupled decay first, as torch.optim.AdamW orders it
      // (p *= 1 - lr * wd, then the Adam update), on the decayed ranges only.
      torch::NoGradGuard no_grad;
      for (const auto& d : o.decay) {
        if (!d.shard->master.grad().defined()) continue;
        d.shard->master.narrow(0, d.offset, d.length).mul_(1 - lr * weight_decay_);
      }
      o.sharded->Step(lr);
      o.sharded->ZeroGrad();
      gathers.insert(gathers.end(), o.shards.begin(), o.shards.end());
    }
  }
  std::stable_sort(gathers.begin(), gathers.end(), [&](const ShardedBucket* a, const ShardedBucket* b) {
    return dp_group_.at(a->stage) < dp_group_.at(b->stage);
  });
  for (const ShardedBucket* sb : gathers) {
    if (zero_.Fsdp(sb->stage)) continue;  // ZeRO-3 gathers at the next use
    zero_.GatherBucket(*sb, buffers != nullptr ? buffers->Scratch(sb->stage, sb->bucket) : torch::Tensor());
    for (auto& p : local_.buckets.at(sb->stage).at(sb->bucket)) p.mutable_grad() = torch::Tensor();
  }
}

std::vector<std::tuple<std::string, torch::Tensor, FusedAdamW*>> OptimizerSteps::Trainable() {
  std::vector<std::tuple<std::string, torch::Tensor, FusedAdamW*>> out;
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
