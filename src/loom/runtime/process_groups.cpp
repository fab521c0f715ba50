#include "loom/runtime/process_groups.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <thread>

namespace loom::runtime {

Group GroupMaker::Make(const std::string& name, int rank, int size) const {
  if (abort_ == nullptr) return MakeGroup(store_, name, rank, size, timeout_s_, host_, cuda_);
  auto task = std::make_shared<std::packaged_task<Group()>>(
      [store = store_, name, rank, size, timeout_s = timeout_s_, host = host_, cuda = cuda_] {
        return MakeGroup(store, name, rank, size, timeout_s, host, cuda);
      });
  std::future<Group> made = task->get_future();
  std::thread([task] { (*task)(); }).detach();
  while (made.wait_for(std::chrono::milliseconds(1)) != std::future_status::ready) {
    if (abort_->abort.load()) throw Aborted();
  }
  Group g = made.get();
  if (keep_alive_ != nullptr) keep_alive_->push_back(g);
  return g;
}

ProcessGroups MakeModelGroups(const GroupMaker& maker, const ExecutionPlan& exec, const ProcessPlace& place,
                              int world) {
  ProcessGroups out;
  out.world = maker.Make("world", place.process, world);
  const int S = place.stages(), shard = place.shard;
  out.tensor_parallel[1] = {};
  for (int v = 0; v < S; ++v) {
    const int T = place.TpOf(v);
    if (!place.IsLocal(v) || T < 2 || out.tp.count(T)) continue;
    out.tp[T] = Group();
  }
  for (auto& [T, group] : out.tp) {
    group = maker.Make(fmt::format("tp{}.{}.{}", place.group, T, shard / T), shard % T, T);
    Group g = group;
    TensorParallel& tp = out.tensor_parallel[T];
    tp.rank = shard % T;
    tp.size = T;
    tp.all_reduce = [g](torch::Tensor& t) { AllReduceSumHere(*g, t); };
    // Sequence parallelism's (runtime/sequence_parallel.h).
    tp.all_gather = [g](const torch::Tensor& mine, torch::Tensor& all) { AllGatherInto(*g, mine, mine.numel(), all); };
    tp.all_to_all = [g](torch::Tensor& in, torch::Tensor& received) { AllToAllHere(*g, in, received); };
  }
  const int CP = place.cp, cp_rank = place.cp_rank;
  if (CP > 1) {
    const int tp_rank = shard % place.cp_tp;
    Group cpg = maker.Make(fmt::format("cp{}.{}", place.group, tp_rank), cp_rank, CP);
    out.cp = cpg;
    ContextParallel& cp = out.context_parallel;
    cp.rank = cp_rank;
    cp.size = CP;
    for (int v = 0; v < S; ++v) {  // this group's stages share one split too (their unit's)
      if (place.IsLocal(v) && exec.stages[v].cp_split == CpSplit::kBalanced) cp.split = CpSplit::kBalanced;
    }
    auto ring_tag = std::make_shared<int>(0);  // every CP rank exchanges the same blocks in the same order
    cp.ring = [cpg, ring_tag, cp_rank, CP](const torch::Tensor& t) {
      std::vector<at::Tensor> out{t.contiguous()};
      const int tag = (*ring_tag)++ % (1 << 30);
      auto work = SendAsync(*cpg, out, (cp_rank + 1) % CP, tag);
      torch::Tensor in = torch::empty_like(out[0]);
      Recv(*cpg, in, (cp_rank + CP - 1) % CP, tag);
      work->wait();
      return in;
    };
    cp.all_reduce = [cpg](torch::Tensor& t) { AllReduceSumHere(*cpg, t); };
    cp.all_gather = [cpg](const torch::Tensor& t) { return AllGather(*cpg, t); };
  }
  return out;
}

void AddDataParallelGroups(ProcessGroups& groups, const GroupMaker& maker, const ExecutionPlan& exec,
                           const ProcessPlace& place, bool layerwise) {
  if (layerwise) return;
  std::map<int, int> stage_of_group;  // a stage of each communication group (they share tp and parts)
  for (int v = 0; v < place.stages(); ++v) stage_of_group.emplace(exec.stages[v].dp_group, v);
  const int G = place.group_gpus;
  for (const CommGroup& cg : exec.groups) {
    const auto& m = cg.gpu_groups;
    const auto at = std::find(m.begin(), m.end(), place.group);
    const int v = stage_of_group.at(cg.id), parts = G / place.TpOf(v);
    const int size = static_cast<int>(m.size()) * parts;
    if (at == m.end() || size < 2) continue;
    const int index = static_cast<int>(at - m.begin()) * parts + place.MyPart(v);
    groups.dp[cg.id] = maker.Make(fmt::format("dp{}.{}", cg.id, place.MyTpRank(v)), index, size);
    groups.dp_place[cg.id] = {index, size};
  }
}

}  // namespace loom::runtime
