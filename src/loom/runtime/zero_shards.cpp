#include "loom/runtime/zero_shards.h"

#include <algorithm>

namespace loom::runtime {

ZeroShards::ZeroShards(const ExecutionPlan& exec, StageBuckets& buckets, const ProcessGroups& groups,
                       const std::function<bool(int)>& holds_tied, AbortFlag abort)
    : buckets_(buckets), groups_(groups), abort_(abort) {
  for (const auto& [v, stage_buckets] : buckets) {
    dp_group_[v] = exec.stages[v].dp_group;
    const auto place = groups.dp_place.find(exec.stages[v].dp_group);
    if (place == groups.dp_place.end() || exec.stages[v].zero_stage < 1 || holds_tied(v)) continue;
    const auto [index, D] = place->second;
    sharded_.insert(v);
    if (exec.stages[v].zero_stage >= 2) scattered_.insert(v);
    if (exec.stages[v].zero_stage >= 3) fsdp_.insert(v);
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
  resident_ = fsdp_;
  for (int v : fsdp_) ReleaseWeights(v);
}

void ZeroShards::GatherBucket(const ShardedBucket& sb) {
  torch::NoGradGuard no_grad;
  torch::Tensor mine = torch::zeros({sb.chunk}, sb.master.options());
  mine.slice(0, 0, sb.hi - sb.lo).copy_(sb.master);
  const torch::Tensor all =
      torch::cat(AllGather(*groups_.dp.at(dp_group_.at(sb.stage)), mine, abort_)).slice(0, 0, sb.total);
  auto& bucket = buckets_.at(sb.stage).at(sb.bucket);
  const auto parts = SplitLike(all, bucket);
  for (size_t i = 0; i < bucket.size(); ++i) {
    if (Fsdp(sb.stage)) ResizeStorage(bucket[i], bucket[i].numel() * bucket[i].element_size());
    bucket[i].variable_data().copy_(parts[i]);  // not an in-place change autograd's saved graph would reject
  }
}

void ZeroShards::GatherWeights(int v) {
  for (const ShardedBucket& sb : shards_) {
    if (sb.stage == v) GatherBucket(sb);
  }
  resident_.insert(v);
}

void ZeroShards::ReleaseWeights(int v) {
  for (const auto& bucket : buckets_.at(v)) {
    for (const auto& p : bucket) ResizeStorage(p, 0);
  }
  resident_.erase(v);
}

}  // namespace loom::runtime
