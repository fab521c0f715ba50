// OptimizerSteps' training checkpoints (optimizer_steps.h CheckpointPart and
// Restore; the format: weights/run_checkpoint.h). A parameter is stored under
// its stage name ("llm_3.q.weight"), its AdamW moments as "NAME#exp_avg" and
// "NAME#exp_avg_sq", always fp32 (the master weights), so that any plan cuts
// its own share from the whole tensor.
#include <fmt/format.h>

#include <algorithm>

#include "loom/error.h"
#include "loom/runtime/optimizer_steps.h"
#include "loom/runtime/training_state.h"
#include "loom/weights/checkpoint_parts.h"

namespace loom::runtime {

namespace {

const char* const kMoments[] = {"#exp_avg", "#exp_avg_sq"};

std::string ShapeCsv(at::IntArrayRef shape) {
  std::string out;
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? "," : "") + std::to_string(shape[i]);
  return out;
}

// A stage's copy of a tied embedding in its head ("{module}_{L}.tied_table")
// equals the embedding ("{module}_0.table"): a checkpoint written where one
// stage held both has the embedding only.
std::string TiedFallback(const std::string& name) {
  const size_t dot = name.rfind(".tied_table");
  if (dot == std::string::npos || dot + 11 != name.size()) return "";
  const size_t bar = name.rfind('_', dot);
  return bar == std::string::npos ? "" : name.substr(0, bar) + "_0.table";
}

// Appends `t` (fp32, on the host, contiguous) to the part under `stored`.
void AddToShare(OptimizerSteps::CheckpointShare& share, const std::string& stored, const torch::Tensor& t) {
  torch::Tensor host = t.detach().to(torch::kCPU, torch::kFloat).contiguous();
  share.keep.push_back(host);
  weights::TensorToWrite w;
  w.name = stored;
  w.dtype = weights::DType::kF32;
  w.shape = host.sizes().vec();
  w.bytes = std::span<const std::byte>(static_cast<const std::byte*>(host.data_ptr()), host.nbytes());
  share.tensors.push_back(std::move(w));
}

// A parameter's AdamW moments and step as the optimizer holds them (no copy:
// a checkpoint's save must not double the optimizer's memory).
ParamState HeldState(const torch::Tensor& p, const FusedAdamW& optimizer) {
  ParamState s;
  s.value = p.detach();
  if (const AdamWMoments* a = optimizer.StateOf(p)) {
    s.exp_avg = a->exp_avg;
    s.exp_avg_sq = a->exp_avg_sq;
    s.step = a->steps;
  }
  return s;
}

}  // namespace

void WriteStatePart(const std::string& path, const TrainingState& state) {
  OptimizerSteps::CheckpointShare share;
  for (const auto& [name, s] : state) {
    AddToShare(share, name, s.value);
    share.metadata[weights::StepKey(name)] = std::to_string(s.step);
    if (s.step == 0) continue;
    AddToShare(share, name + kMoments[0], s.exp_avg);
    AddToShare(share, name + kMoments[1], s.exp_avg_sq);
  }
  weights::WriteSafetensors(path, share.tensors, share.metadata);
}

OptimizerSteps::CheckpointShare OptimizerSteps::CheckpointPart(const std::function<bool(int)>& first_holder) {
  torch::NoGradGuard no_grad;
  CheckpointShare share;
  // A TP slice says which it is; whole tensors TP does not split come from TP rank 0 only.
  auto slice_of = [&](int v, const std::string& name, const std::string& stored) -> bool {
    const int dim = local_.stacks.at(v)->TensorParallelDim(name);
    const auto [rank, degree] = tp_of_.at(v);
    if (degree > 1 && dim >= 0) {
      share.metadata[weights::SliceKey(stored)] = fmt::format("{}/{}/{}", dim, rank, degree);
      return true;
    }
    return rank == 0;
  };
  for (auto& [v, stack] : local_.stacks) {
    if (zero_.Sharded(v) || !first_holder(v)) continue;
    RankOptimizer& o = optimizers_.at(stage_rank_.at(v));
    for (const auto& item : stack->named_parameters()) {
      const torch::Tensor& p = item.value();
      if (!p.requires_grad() || !o.replicated) continue;
      const std::string& name = item.key();
      if (!slice_of(v, name, name)) continue;
      const ParamState s = HeldState(p, *o.replicated);
      AddToShare(share, name, s.value);
      share.metadata[weights::StepKey(name)] = std::to_string(s.step);
      if (s.step == 0) continue;
      for (const char* m : kMoments) {
        slice_of(v, name, name + m);
        AddToShare(share, name + m, m == kMoments[0] ? s.exp_avg : s.exp_avg_sq);
      }
    }
  }
  for (auto& [r, o] : optimizers_) {
    for (ShardedBucket* sb : o.shards) {
      const ParamState s = HeldState(sb->master, *o.sharded);
      const auto& bucket = local_.buckets.at(sb->stage).at(sb->bucket);
      for (const ShardRange& range : ShardRanges(*sb, bucket)) {
        const torch::Tensor& p = bucket[range.param];
        const std::string& name = name_of_.at(p.unsafeGetTensorImpl());
        if (!slice_of(sb->stage, name, name)) continue;
        const std::vector<std::pair<std::string, torch::Tensor>> stored = {
            {name, s.value}, {name + kMoments[0], s.exp_avg}, {name + kMoments[1], s.exp_avg_sq}};
        for (const auto& [key, t] : stored) {
          if (!t.defined()) continue;
          slice_of(sb->stage, name, key);
          AddToShare(share, key, t.narrow(0, range.at, range.length));
          share.metadata[weights::RangeKey(key)] = fmt::format("{}/{}/{}", range.begin, range.length, p.numel());
          share.metadata[weights::ShapeKey(key)] = ShapeCsv(p.sizes());
        }
        share.metadata[weights::StepKey(name)] = std::to_string(s.step);
      }
    }
  }
  return share;
}

namespace {

// This process's share of `name` (its TP slice of the whole tensor, as
// `stack` splits it), as `like` is shaped; moments, where `stored` is one.
torch::Tensor ShareOf(const weights::RunCheckpointReader& reader, const LayerStackImpl& stack, const std::string& name,
                      const std::string& stored, const torch::Tensor& like, int tp_rank, int tp_degree) {
  std::string from = stored;
  if (!reader.Has(from)) {
    const std::string tied = TiedFallback(name);
    if (!tied.empty() && reader.Has(tied + stored.substr(name.size()))) from = tied + stored.substr(name.size());
  }
  if (!reader.Has(from)) {
    throw Error(fmt::format("checkpoint {}: holds no tensor '{}' that this model has: a checkpoint of another model",
                            reader.folder(), from));
  }
  std::vector<int64_t> shape;
  std::vector<float> values = reader.Read(from, &shape);
  const int dim = tp_degree > 1 ? stack.TensorParallelDim(name) : -1;
  const std::vector<int64_t> want = stack.WholeShape(name, like.sizes().vec());
  if (shape != want) {
    throw Error(
        fmt::format("checkpoint {}: tensor '{}' is [{}] there, [{}] in this model: a checkpoint of another "
                    "model",
                    reader.folder(), from, ShapeCsv(shape), ShapeCsv(want)));
  }
  torch::Tensor whole = torch::from_blob(values.data(), shape, torch::kFloat).clone();
  if (dim >= 0) whole = whole.narrow(dim, weights::SliceSpanOf(shape[dim], tp_rank, tp_degree).begin, like.size(dim));
  return whole.contiguous();
}

}  // namespace

void OptimizerSteps::Restore(const weights::RunCheckpointReader& reader) {
  torch::NoGradGuard no_grad;
  for (auto& [v, stack] : local_.stacks) {
    const auto [rank, degree] = tp_of_.at(v);
    RankOptimizer& o = optimizers_.at(stage_rank_.at(v));
    for (auto& item : stack->named_parameters()) {
      torch::Tensor p = item.value();
      if (!p.requires_grad()) continue;
      const std::string& name = item.key();
      if (zero_.Sharded(v)) {  // the slice below; the full weights too unless ZeRO-3 released them
        if (!zero_.Fsdp(v)) zero_.SetWeights(v, p, ShareOf(reader, *stack, name, name, p, rank, degree).to(p.device()));
        continue;
      }
      ParamState s;
      s.value = ShareOf(reader, *stack, name, name, p, rank, degree);
      // A tied copy restored from the embedding takes its step count too.
      s.step = reader.Step(reader.Has(name) || TiedFallback(name).empty() ? name : TiedFallback(name));
      if (s.step > 0) {
        s.exp_avg = ShareOf(reader, *stack, name, name + kMoments[0], p, rank, degree);
        s.exp_avg_sq = ShareOf(reader, *stack, name, name + kMoments[1], p, rank, degree);
      }
      RestoreParam(name, p, *o.replicated, s);
    }
  }
  for (auto& [r, o] : optimizers_) {
    for (ShardedBucket* sb : o.shards) {
      const auto [rank, degree] = tp_of_.at(sb->stage);
      std::vector<torch::Tensor> parts[3];
      ParamState s;
      const auto& bucket = local_.buckets.at(sb->stage).at(sb->bucket);
      for (const ShardRange& range : ShardRanges(*sb, bucket)) {
        const torch::Tensor& p = bucket[range.param];
        const std::string& name = name_of_.at(p.unsafeGetTensorImpl());
        // A tied copy restored from the embedding takes its step count too.
        const int64_t step = reader.Step(reader.Has(name) || TiedFallback(name).empty() ? name : TiedFallback(name));
        if (s.step != 0 && step != s.step) {
          throw Error(fmt::format("checkpoint {}: '{}' took {} AdamW steps where the tensors sharded with it took {}",
                                  reader.folder(), name, step, s.step));
        }
        s.step = step;
        const std::string stored[3] = {name, name + kMoments[0], name + kMoments[1]};
        for (int k = 0; k < (step > 0 ? 3 : 1); ++k) {
          parts[k].push_back(ShareOf(reader, *local_.stacks.at(sb->stage), name, stored[k], p, rank, degree)
                                 .reshape({-1})
                                 .narrow(0, range.begin, range.length));
        }
      }
      s.value = torch::cat(parts[0]).to(sb->master.device());
      if (s.step > 0) {
        s.exp_avg = torch::cat(parts[1]);
        s.exp_avg_sq = torch::cat(parts[2]);
      }
      RestoreParam(fmt::format("ZeRO shard of stage {} bucket {}", sb->stage, sb->bucket), sb->master, *o.sharded, s);
    }
  }
  for (auto& [v, stack] : local_.stacks) stack->ClearComputeCopies();
}

}  // namespace loom::runtime
