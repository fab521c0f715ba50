#include "loom/runtime/zero_shards.h"

#include <fmt/format.h>

#include <algorithm>

#include "loom/error.h"

namespace loom::runtime {

std::vector<ShardRange> ShardRanges(const ShardedBucket& sb, const std::vector<torch::Tensor>& bucket) {
  std::vector<ShardRange> out;
  int64_t start = 0;
  for (size_t i = 0; i < bucket.size(); ++i) {
    const int64_t lo = std::max(start, sb.lo), hi = std::min(start + bucket[i].numel(), sb.hi);
    if (lo < hi) out.push_back({i, lo - start, hi - lo, lo - sb.lo});
    start += bucket[i].numel();
  }
  return out;
}

ZeroShards::ZeroShards(const ExecutionPlan& exec, StageBuckets& buckets, const ProcessGroups& groups,
                       const std::function<bool(int)>& holds_tied, AbortFlag abort)
    : buckets_(buckets), groups_(groups), abort_(abort) {
  for (const auto& [v, stage_buckets] : buckets) {
    dp_group_[v] = exec.stages[v].dp_group;
    const int zero = StageOf(exec, groups, v, holds_tied(v));
    if (zero < 1) continue;
    const auto [index, D] = groups.dp_place.at(exec.stages[v].dp_group);
    sharded_.insert(v);
    if (zero >= 2) scattered_.insert(v);
    if (zero >= 3) fsdp_.insert(v);
    for (size_t b = 0; b < stage_buckets.size(); ++b) {
      if (stage_buckets[b].empty()) continue;
      ShardedBucket sb{v, static_cast<int>(b)};
      for (const auto& p : stage_buckets[b]) sb.total += p.numel();
      sb.chunk = (sb.total + D - 1) / D;
      sb.lo = std::min(sb.total, index * sb.chunk);
      sb.hi = std::min(sb.total, sb.lo + sb.chunk);
      torch::NoGradGuard no_grad;
      sb.master = Flatten(stage_buckets[b]).slice(0, sb.lo, sb.hi).clone().requires_grad_(true);
      shards_.push_back(std::move(sb));
    }
  }
  for (int v : fsdp_) ReleaseWeights(v);
}

std::vector<std::pair<torch::Tensor, torch::Tensor>> ZeroShards::HoldFlatWeights(int v, torch::ScalarType dtype) {
  std::vector<std::pair<torch::Tensor, torch::Tensor>> held;
  if (!Sharded(v) || Fsdp(v)) return held;
  torch::NoGradGuard no_grad;
  for (ShardedBucket& sb : shards_) {
    if (sb.stage != v) continue;
    const auto& bucket = buckets_.at(v).at(sb.bucket);
    const int64_t D = groups_.dp.at(dp_group_.at(v))->getSize();
    sb.weights = torch::zeros({sb.chunk * D}, sb.master.options().dtype(dtype));
    sb.weights.narrow(0, 0, sb.total).copy_(Flatten(bucket));
    int64_t at = 0;
    for (const auto& p : bucket) {
      const torch::Tensor w = sb.weights.narrow(0, at, p.numel()).view(p.sizes());
      if (dtype == p.scalar_type()) {
        p.set_data(w);  // the parameter is its part of the flat weights
      } else {
        held.emplace_back(p, w);
        ResizeStorage(p, 0);
      }
      at += p.numel();
    }
    // fp32: the master slice is this replica's chunk of the weights itself.
    if (dtype == sb.master.scalar_type()) {
      sb.master = sb.weights.narrow(0, sb.lo, sb.hi - sb.lo).detach().requires_grad_(true);
    }
  }
  if (dtype != torch::kFloat) released_.insert(v);
  return held;
}

void ZeroShards::SetWeights(int v, const torch::Tensor& p, const torch::Tensor& value) {
  torch::NoGradGuard no_grad;
  for (const ShardedBucket& sb : shards_) {
    if (sb.stage != v || !sb.weights.defined()) continue;
    int64_t at = 0;
    for (const auto& q : buckets_.at(v).at(sb.bucket)) {
      if (q.unsafeGetTensorImpl() == p.unsafeGetTensorImpl()) {
        sb.weights.narrow(0, at, q.numel()).copy_(value.reshape({-1}));
        return;
      }
      at += q.numel();
    }
  }
  p.copy_(value);  // a stage whose parameters hold their weights themselves
}

void ZeroShards::GatherBucket(const ShardedBucket& sb, const torch::Tensor& scratch, bool into_parameters) {
  torch::NoGradGuard no_grad;
  auto& group = *groups_.dp.at(dp_group_.at(sb.stage));
  // Gathered straight into one flat buffer (no second full-size copy).
  const int64_t gathered = sb.chunk * group.getSize();
  torch::Tensor flat = scratch.defined() && scratch.numel() >= gathered && scratch.dtype() == sb.master.dtype()
                           ? scratch.narrow(0, 0, gathered)
                           : torch::empty({gathered}, sb.master.options());
  AllGatherInto(group, sb.master.detach(), sb.chunk, flat, abort_);
  const torch::Tensor all = flat.slice(0, 0, sb.total);
  if (sb.weights.defined() && !into_parameters) {  // the parameters (fp32) or their held copies (16-bit)
    sb.weights.narrow(0, 0, sb.total).copy_(all);
    return;
  }
  auto& bucket = buckets_.at(sb.stage).at(sb.bucket);
  const auto parts = SplitLike(all, bucket);
  for (size_t i = 0; i < bucket.size(); ++i) {
    if (Released(sb.stage)) ResizeStorage(bucket[i], bucket[i].numel() * bucket[i].element_size());
    bucket[i].variable_data().copy_(parts[i]);  // not an in-place change autograd's saved graph would reject
  }
}

void ZeroShards::HoldSliceGradients() {
  torch::NoGradGuard no_grad;
  for (ShardedBucket& sb : shards_) {
    // ZeRO-1's are views of the whole gradients (gradient_buffers.h); ZeRO-2
    // holds those from its first backward, its slices from the sum's wait.
    if (!Fsdp(sb.stage)) continue;
    if (sb.master.grad().defined()) {
      sb.master.mutable_grad().zero_();
    } else {
      sb.master.mutable_grad() = torch::zeros_like(sb.master);
    }
  }
}

void ZeroShards::GatherWeights(int v) {
  for (const ShardedBucket& sb : shards_) {
    if (sb.stage == v) GatherBucket(sb, torch::Tensor(), /*into_parameters=*/true);
  }
}

int ZeroShards::StageOf(const ExecutionPlan& exec, const ProcessGroups& groups, int v, bool holds_tied) {
  if (!groups.dp_place.count(exec.stages[v].dp_group)) return 0;
  // A tied copy's gradient is summed with the other copy's after the
  // buckets' all-reduce (OptimizerSteps::SumShared), which needs it whole:
  // ZeRO-1 keeps whole gradients (the shards are views of them,
  // gradient_buffers.h), ZeRO-2/3 would have dropped them. The compiled plan
  // gives such a stage ZeRO-1 at most (plan/compile_plan.cpp), so that the
  // simulator prices what runs.
  if (holds_tied && exec.stages[v].zero_stage > 1) {
    throw Error(
        fmt::format("runtime: stage {} holds a tied embedding's copy at ZeRO-{}; its plan was compiled "
                    "without the ZeRO-1 cap such a stage takes",
                    v, exec.stages[v].zero_stage));
  }
  return exec.stages[v].zero_stage;
}

ShardedBucket* ZeroShards::Find(int v, int bucket) {
  for (auto& sb : shards_) {
    if (sb.stage == v && sb.bucket == bucket) return &sb;
  }
  return nullptr;
}

void ZeroShards::GatherBucket(int v, int bucket) {
  if (const ShardedBucket* sb = Find(v, bucket)) GatherBucket(*sb);
}

void ZeroShards::ReleaseBucket(int v, int bucket) {
  if (Find(v, bucket) == nullptr) return;
  for (const auto& p : buckets_.at(v).at(bucket)) ResizeStorage(p, 0);
}

void ZeroShards::ReduceScatterGradients(int v, int bucket) {
  ShardedBucket* sb = Find(v, bucket);
  if (sb == nullptr) return;
  torch::NoGradGuard no_grad;
  auto& group = *groups_.dp.at(dp_group_.at(v));
  const int64_t D = group.getSize();
  // Each gradient copied into the padded buffer and dropped at once: no
  // flat copy beside them (a parameter without one contributes zeros).
  torch::Tensor padded = torch::zeros({sb->chunk * D}, sb->master.options());
  int64_t at = 0;
  for (const auto& p : buckets_.at(v).at(bucket)) {
    if (p.grad().defined()) padded.slice(0, at, at + p.numel()).copy_(p.grad().reshape({-1}));
    p.mutable_grad() = torch::Tensor();  // the full gradients are not kept
    at += p.numel();
  }
  torch::Tensor received = torch::empty_like(padded);
  Await(ReduceScatterAsync(group, padded, received), abort_);
  AwaitRelease(padded);
  AwaitRelease(received);
  padded = torch::Tensor();
  const torch::Tensor mine = received.view({D, sb->chunk}).sum(0).slice(0, 0, sb->hi - sb->lo);
  if (sb->master.grad().defined()) {
    sb->master.mutable_grad().add_(mine);
  } else {
    sb->master.mutable_grad() = mine.clone();
  }
}

void ZeroShards::ReleaseWeights(int v) {
  for (const auto& bucket : buckets_.at(v)) {
    for (const auto& p : bucket) ResizeStorage(p, 0);
  }
}

}  // namespace loom::runtime
