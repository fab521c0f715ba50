#include "loom/runtime/tensor_memory.h"
#include "loom/runtime/worker.h"

#include <fmt/format.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <map>
#include <numeric>
#include <set>
#include <thread>
#include <tuple>

#include "loom/data/sample_source.h"
#include "loom/error.h"
#include "loom/cost/layer_pricing.h"
#include "loom/pipeline/validate.h"
#include "loom/plan/compile_plan.h"
#include "loom/plan/plan_json.h"
#include "loom/runtime/c10d_calls.h"
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include "loom/runtime/fault_tolerance.h"
#include "loom/runtime/green_context.h"
#include "loom/runtime/packing.h"
#include "loom/runtime/process_layout.h"
#include "loom/runtime/torch_model.h"
#include "loom/runtime/training_state.h"
#ifdef LOOM_HAVE_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/cuda.h>
#include <torch/version.h>
#endif

namespace loom::runtime {

namespace {

void Report(int fd, const std::string& line) {
  const std::string text = line + "\n";
  ssize_t off = 0;
  while (off < static_cast<ssize_t>(text.size())) {
    const ssize_t n = write(fd, text.data() + off, text.size() - off);
    if (n <= 0) return;
    off += n;
  }
}


// A message between stages: producer stage `from`'s microbatch `mb` on its
// way to consumer stage `to`'s microbatch `consumer` (activations forward,
// their gradients back), from the sender's `part` of its GPU group (its CP rank
// or sequence share; 0 for most stages).
struct MessageKey {
  int from = 0, to = 0, mb = 0, consumer = 0, part = 0;
  auto operator<=>(const MessageKey&) const = default;
};

// Gloo pairs messages by (peer, tag): one tag per (payload, message).
int Tag(Payload payload, const MessageKey& m, int stages, int microbatches, int parts) {
  const int64_t tag =
      (((((static_cast<int64_t>(payload) * stages + m.from) * stages + m.to) * microbatches + m.mb) * microbatches) +
       m.consumer) * parts + m.part;
  if (tag > 0x7fffffff) {
    throw Error(fmt::format("runtime: {} stages of up to {} microbatches ({} parts of a group) need more message "
                            "tags than Gloo has",
                            stages, microbatches, parts));
  }
  return static_cast<int>(tag);
}

// Per layer of stage v, the recomputation microbatch k of replica r runs with.
std::vector<Recompute> LayerRecompute(const ExecutionPlan& e, int r, int v, int k) {
  const auto& per_layer = e.replicas[r][v][k].layer_recompute;
  if (!per_layer.empty()) return per_layer;
  return std::vector<Recompute>(e.stages[v].num_layers(), e.stages[v].recompute);
}

// ZeRO-1: this replica's slice [lo, hi) of a gradient bucket's flat
// parameters (chunks of `chunk` elements per replica, the last one short),
// with the AdamW state of only that slice.
struct ShardedBucket {
  int stage = 0, bucket = 0;
  int64_t total = 0, chunk = 0, lo = 0, hi = 0;
  torch::Tensor master;
};

// One flat buffer of the tensors' values (a message or a bucket). No tensors:
// an empty buffer on `device` (a chain edge between stages of which the later
// reads nothing of the earlier, such as two towers no module joins).
torch::Tensor Flatten(const std::vector<torch::Tensor>& parts, const torch::Device& device = torch::kCPU) {
  if (parts.empty()) return torch::empty({0}, torch::TensorOptions().device(device));
  std::vector<torch::Tensor> flat;
  for (const auto& t : parts) flat.push_back(t.reshape({-1}));
  return torch::cat(flat);
}

// `flat` cut into views shaped like `like`.
std::vector<torch::Tensor> SplitLike(const torch::Tensor& flat, const std::vector<torch::Tensor>& like) {
  std::vector<torch::Tensor> out;
  int64_t off = 0;
  for (const auto& t : like) {
    out.push_back(flat.slice(0, off, off + t.numel()).view(t.sizes()));
    off += t.numel();
  }
  return out;
}

// The stage's trainable parameters cut into `count` buckets of about equal
// size, last parameters first (their gradients are ready first in the backward).
std::vector<std::vector<torch::Tensor>> Buckets(const std::vector<torch::Tensor>& params, int count) {
  int64_t total = 0;
  for (const auto& p : params) total += p.numel();
  std::vector<std::vector<torch::Tensor>> out(count);
  int64_t seen = 0;
  for (auto it = params.rbegin(); it != params.rend(); ++it) {
    const int b = std::min<int64_t>(count - 1, seen * count / std::max<int64_t>(1, total));
    out[b].push_back(*it);
    seen += it->numel();
  }
  return out;
}

// What producer (stage, microbatch) handed to one consumer microbatch, as the
// consumer holds it: one leaf per handed module (requires_grad, so the
// consumer's backward leaves the gradient to send back in .grad), the
// producer's packing (where each sequence lies in it), and how many consumer
// microbatches read it and have finished their backward (its gradient goes
// back only when all have).
struct Message {
  std::vector<int> modules;
  std::vector<torch::Tensor> leaves;
  const MicrobatchPacking* packing = nullptr;
  int users = 0, finished = 0;
  // module -> (sample, doc, image, clip) -> offset of that sequence in the leaf
  using Key = std::tuple<int, int, int, int>;
  std::map<int, std::map<Key, int64_t>> where;
  const std::map<Key, int64_t>& Where(int module) {
    auto [it, inserted] = where.try_emplace(module);
    if (inserted) {
      int64_t offset = 0;
      for (const auto& s : packing->modules[module]) {
        it->second.emplace(Key{s.sample, s.doc, s.image, s.clip}, offset);
        offset += s.tokens;
      }
    }
    return it->second;
  }
  int Slot(int module) const {
    for (size_t i = 0; i < modules.size(); ++i) {
      if (modules[i] == module) return static_cast<int>(i);
    }
    return -1;
  }
};

// Consumer microbatch `consumer`'s tensor of `module`, its sequences in its own
// packing order, cut out of the messages that carry them: first `own` (the
// producer microbatches its edges give it), then any other message of the same
// edges (a consumer sub-microbatch that shares its producers with an earlier
// one, PipeWeaver's woven edges). Autograd routes each row's gradient back to
// the message it came from. Marks the messages it reads as used.
torch::Tensor Assemble(int module, int64_t width, const MicrobatchPacking& consumer, const std::vector<Message*>& own,
                       const std::vector<Message*>& pool, std::set<Message*>& used, const std::string& where,
                       const torch::Device& device) {
  std::vector<torch::Tensor> runs;
  Message* run_msg = nullptr;
  int64_t run_begin = 0, run_end = 0;
  auto flush = [&]() {
    if (run_msg != nullptr) runs.push_back(run_msg->leaves[run_msg->Slot(module)].narrow(1, run_begin, run_end - run_begin));
    run_msg = nullptr;
  };
  for (const auto& s : consumer.modules[module]) {
    const Message::Key key{s.sample, s.doc, s.image, s.clip};
    Message* found = nullptr;
    int64_t offset = 0;
    for (const auto* list : {&own, &pool}) {
      for (Message* m : *list) {
        if (found != nullptr || m->Slot(module) < 0) continue;
        const auto& w = m->Where(module);
        if (auto f = w.find(key); f != w.end()) {
          found = m;
          offset = f->second;
        }
      }
    }
    if (found == nullptr) {
      throw Error(fmt::format("runtime: {}: no message carries module {}'s sequence of sample {} (document {}, "
                              "image {}, clip {})",
                              where, module, s.sample, s.doc, s.image, s.clip));
    }
    used.insert(found);
    if (found == run_msg && offset == run_end) {
      run_end += s.tokens;
      continue;
    }
    flush();
    run_msg = found;
    run_begin = offset;
    run_end = offset + s.tokens;
  }
  flush();
  if (runs.empty()) return torch::zeros({1, 0, width}, torch::TensorOptions().device(device));
  if (runs.size() == 1) return runs[0];
  return torch::cat(runs, 1);
}

}  // namespace

namespace {

// One generation of a fault-tolerant run's worker (runtime/fault_tolerance.h):
// the plan it runs from `first_step`, and what carries over to the next.
struct Generation {
  WorkerControl* control = nullptr;
  c10::intrusive_ptr<c10d::Store> store;  // the run's store (its own process serves it)
  int id = 0;
  int first_step = 0;
  std::string resume_from;  // generation 0 of `loom run --resume`: the checkpoint
  // In: what this worker holds as of first_step (empty in generation 0). Out,
  // after an abort: what it holds as of the step the launcher's command names.
  TrainingState carry;
  // Every group this worker made: an aborted generation's groups are never
  // destroyed (their threads may still wait on a dead peer until c10d's
  // timeout; a destructor would wait with them).
  std::vector<Group> keep_alive;
  std::chrono::steady_clock::time_point commanded = std::chrono::steady_clock::now();
};

// Thrown out of a generation whose launcher sent its next command.
struct Reconfigure {};

}  // namespace

void CheckFaultTolerable(const Model& model, const Plan& plan) {
  auto refuse = [&](const std::string& why) {
    throw Error("--fault-tolerance: " + why +
                "; a fault-tolerant run keeps whole layers with their AdamW state in every pipeline (Oobleck's "
                "premise: a survivor holds what a failed node held)");
  };
  if (plan.units.size() != 1) refuse(fmt::format("the plan has {} units; it runs one", plan.units.size()));
  const Unit& u = plan.units[0];
  if (u.tp > 1 || u.cp > 1) refuse("tensor and context parallelism are not run fault-tolerantly yet");
  for (const auto& ps : u.pipelines) {
    for (const auto& st : ps.stages) {
      if (st.tp > 1) refuse("tensor parallelism is not run fault-tolerantly yet");
    }
  }
  if (u.zero_stage != 0) {
    refuse(fmt::format("unit {} shards its optimizer state over its replicas (zero_stage {}); fault tolerance needs "
                       "zero_stage 0",
                       u.name, u.zero_stage));
  }
  for (const auto& m : model.modules) {
    if (!m.layers.empty() && m.layers.back().kind == LayerKind::kLmHead && m.layers.back().tied) {
      refuse(fmt::format("module {} ties its LM head to its embedding, which is not run fault-tolerantly yet", m.name));
    }
  }
}

ExecutionPlan CompileForRuntime(const Model& model, const Cluster& cluster, const Workload& workload,
                                const Plan& plan, const Batch& batch, const IterationSchedule* it) {
  for (const Unit& u : plan.units) {
    if (u.pipelines.size() != 1) {
      // Oobleck's heterogeneous templates: gradients are summed layer by layer
      // over every process holding the layer (the worker's layer segments),
      // with a replicated optimizer; TP, CP and ZeRO sharding inside are not
      // run yet.
      bool tp = u.tp > 1;
      for (const auto& ps : u.pipelines) {
        for (const auto& st : ps.stages) tp = tp || st.tp > 1;
      }
      if (plan.units.size() > 1 || tp || u.cp > 1 || u.zero_stage > 1) {
        throw Error(fmt::format("runtime: unit {} has {} pipeline templates with {}; Oobleck's heterogeneous "
                                "templates run alone, without TP, CP or ZeRO-2/3",
                                u.name, u.pipelines.size(),
                                plan.units.size() > 1 ? "other units"
                                : tp                  ? "tensor parallelism"
                                : u.cp > 1            ? "context parallelism"
                                                      : fmt::format("zero_stage {}", u.zero_stage)));
      }
    }
    // SM quotas (Mosaic): on a CPU the units sharing a process run one after
    // another in its order (the quota only shapes the prediction); on CUDA a
    // one-process run puts them on green-context streams (green_context.h),
    // and run.cpp refuses several units per GPU across processes.
    for (const auto& name : u.modules) {
      if (!SplitsOverTensorParallel(model.modules[model.FindModule(name)], u.tp)) {
        throw Error(fmt::format("runtime: module {} does not split over tp {} (its heads do not divide); "
                                "replicating it inside the TP group is not run yet",
                                name, u.tp));
      }
    }
  }
  if (it != nullptr && !it->deferred.empty()) {
    throw Error(fmt::format("runtime: the iteration schedule defers {} sample(s) to the next iteration; deferral is "
                            "not run yet",
                            it->deferred.size()));
  }
  ExecutionPlan exec = CompilePlan(model, cluster, workload, plan, batch, it);
  const auto towers = TowerEnds(model, exec);
  for (size_t v = 0; v < exec.stages.size(); ++v) {
    if (exec.stages[v].cp > 1 && !towers[v].empty()) {
      throw Error(fmt::format("runtime: stage {} ends module {}, a tower no module reads, under context parallelism "
                              "{}; its surrogate loss over gathered rows is not run yet",
                              exec.stages[v].label, model.modules[towers[v].front()].name, exec.stages[v].cp));
    }
  }
  for (const auto& st : exec.stages) {
    if (st.cp > 1 && st.seq_share > 1) {
      throw Error(fmt::format("runtime: stage {} runs context parallelism {} and shares sequences over {} more GPUs "
                              "of its group; both at once is not run yet (use groups of tp x cp GPUs)",
                              st.label, st.cp, st.seq_share));
    }
    CheckRunnable(model, st.layers);
  }
  for (const auto& e : exec.schedule.StageEdges()) {
    const ExecStage &a = exec.stages[e.from], &b = exec.stages[e.to];
    if (exec.schedule.stage_rank[e.from] == exec.schedule.stage_rank[e.to] &&
        (a.tp != b.tp || a.seq_share != b.seq_share)) {
      throw Error(fmt::format("runtime: stages {} and {} of one rank split their group differently (tp {} / {}, "
                              "sequence shares {} / {}); that is not run yet",
                              a.label, b.label, a.tp, b.tp, a.seq_share, b.seq_share));
    }
    if (a.cp > 1 && a.tp != b.tp) {
      throw Error(fmt::format("runtime: stages {} and {} run context parallelism at different tp ({} / {}); that is "
                              "not run yet",
                              a.label, b.label, a.tp, b.tp));
    }
  }
  // Units may differ in context parallelism (Cornstarch: a CP LLM fed by
  // encoders sharing their groups' sequences), but the stages one GPU group
  // runs share one.
  const ProcessLayout placed = LayoutProcesses(exec);  // throws for what it cannot place
  for (size_t g = 0; g < placed.of_group.size(); ++g) {
    int cp = -1, first = -1;
    for (const RankCopy& c : placed.of_group[g]) {
      for (int v = 0; v < exec.schedule.num_stages(); ++v) {
        if (exec.schedule.stage_rank[v] != c.rank) continue;
        if (cp < 0) {
          cp = exec.stages[v].cp;
          first = v;
        } else if (exec.stages[v].cp != cp) {
          throw Error(fmt::format("runtime: GPU group {} runs stages {} (cp {}) and {} (cp {}); stages of different "
                                  "context parallelism on one group are not run yet",
                                  g, exec.stages[first].label, cp, exec.stages[v].label, exec.stages[v].cp));
        }
      }
    }
  }
  StageOutputs(model, exec);
  for (const auto& stages : exec.replicas) {
    for (const auto& mbs : stages) {
      for (const auto& mb : mbs) PackMicrobatch(model, batch, mb.pieces);  // the inputs are ones the runtime packs
    }
  }
  return exec;
}

namespace {

// Runs steps first_step.. of spec's plan. `gen`: a fault-tolerant run's
// generation (null otherwise); throws Reconfigure when its launcher sent a
// gen or stop command, with gen->carry set to the state as of that command's step.
void RunGeneration(const WorkerSpec& spec, int fd, Generation* gen) {
  {
    const Model& model = *spec.model;
    SetComputeThreads(std::max(1, spec.options.threads_per_rank));
    auto schedule_of = [&](int step) -> const IterationSchedule* {
      if (spec.schedules == nullptr || step >= static_cast<int>(spec.schedules->size())) return nullptr;
      const auto& s = (*spec.schedules)[step];
      return s ? &*s : nullptr;
    };
    const int first_step = gen ? gen->first_step : 0;
    Batch batch = DrawBatch(*spec.workload, first_step);
    ExecutionPlan exec =
        CompileForRuntime(model, *spec.cluster, *spec.workload, *spec.plan, batch, schedule_of(first_step));
    const ProcessLayout layout = LayoutProcesses(exec);
    // Per stage, its group's G processes are tp shards (fastest, Megatron's
    // order) of G / tp parts: CP ranks, or sequence shares (the microbatch's
    // samples split between them).
    const int G = layout.group_gpus;
    const int my_group = spec.rank / G, shard = spec.rank % G;
    const int S = exec.schedule.num_stages();
    auto tp_of = [&](int v) { return exec.stages[v].tp; };
    auto tp_rank_of = [&](int v, int s) { return s % tp_of(v); };
    auto part_of = [&](int v, int s) { return s / tp_of(v); };
    auto shares = [&](int v) { return exec.stages[v].seq_share > 1; };
    const std::vector<RankCopy> copies =
        my_group < static_cast<int>(layout.of_group.size()) ? layout.of_group[my_group] : std::vector<RankCopy>{};
    // A replicated plan's process runs one copy of one pipeline rank; other
    // plans' processes run copy 0 of each rank placed on their group.
    const int rho = copies.empty() ? 0 : copies[0].replica;
    const int content = exec.replicated ? rho : 0;  // index into exec.replicas
    std::vector<int> local_ranks;
    for (const auto& c : copies) local_ranks.push_back(c.rank);
    auto group_of = [&](int rank) { return layout.GroupOf({rank, rho}); };
    auto process_of = [&](int rank) { return group_of(rank) * G + shard; };
    auto is_local = [&](int stage) {
      return std::find(local_ranks.begin(), local_ranks.end(), exec.schedule.stage_rank[stage]) != local_ranks.end();
    };
    // This group's context parallelism (one per group, CompileForRuntime checks):
    // its CP ranks are the parts of its stages' TP shards.
    int CP = 1, cp_tp = 1;
    for (int v = 0; v < S; ++v) {
      if (!is_local(v)) continue;
      CP = exec.stages[v].cp;
      cp_tp = tp_of(v);
      break;
    }
    const int cp_rank = CP > 1 ? shard / cp_tp : 0;
    const std::string& host = spec.options.host;
    const double timeout_s = spec.options.timeout_s;
    // A fault-tolerant run's generations rendezvous under their own prefix of
    // the run's store; an aborted generation's keys are never read again.
    const c10::intrusive_ptr<c10d::Store> store =
        gen ? c10::intrusive_ptr<c10d::Store>(
                  c10::make_intrusive<c10d::PrefixStore>(fmt::format("g{}/", gen->id), gen->store))
            : MakeStore(spec.options.master_addr, spec.rank, spec.world, spec.port, timeout_s, false,
                        /*other_machines=*/spec.options.nnodes > 1);
    const AbortFlag abort = gen ? gen->control : nullptr;
    // CUDA: one GPU per process of this node, NCCL groups; else host tensors and Gloo.
    const bool cuda = spec.options.device == "cuda";
    const torch::Device device = cuda ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(
                                                                        spec.rank % spec.options.local_processes))
                                      : torch::Device(torch::kCPU);
    auto make_group = [&](const std::string& name, int rank, int size) {
      if (!gen) return MakeGroup(store, name, rank, size, timeout_s, host, cuda);
      // A rendezvous waits in the store for every member, and a member may have
      // died: it runs on a thread of its own, abandoned if the launcher's
      // command arrives first (it ends at the store's timeout, harmlessly).
      auto task = std::make_shared<std::packaged_task<Group()>>(
          [store, name, rank, size, timeout_s, host, cuda] {
            return MakeGroup(store, name, rank, size, timeout_s, host, cuda);
          });
      std::future<Group> made = task->get_future();
      std::thread([task] { (*task)(); }).detach();
      while (made.wait_for(std::chrono::milliseconds(1)) != std::future_status::ready) {
        if (abort->abort.load()) throw Aborted();
      }
      Group g = made.get();
      gen->keep_alive.push_back(g);
      return g;
    };
    auto pg = make_group("world", spec.rank, spec.world);
    // The GPU group's processes: tensor-parallel groups for each TP degree its
    // stages use (ascending, as every process of the group creates them),
    // context-parallel ranks of each shard.
    std::map<int, Group> tp_groups;
    std::map<int, TensorParallel> tensor_parallel;  // TP degree -> this process's shard
    tensor_parallel[1] = {};
    for (int v = 0; v < S; ++v) {
      const int T = tp_of(v);
      if (!is_local(v) || T < 2 || tp_groups.count(T)) continue;
      tp_groups[T] = Group();
    }
    for (auto& [T, group] : tp_groups) {
      group = make_group(fmt::format("tp{}.{}.{}", my_group, T, shard / T), shard % T, T);
      Group g = group;
      tensor_parallel[T] = {shard % T, T, [g](torch::Tensor& t) { AllReduceSum(*g, t); }};
    }
    Group cpg;
    ContextParallel context_parallel;
    auto ring_tag = std::make_shared<int>(0);  // every CP rank exchanges the same blocks in the same order
    if (CP > 1) {
      const int tp_rank = shard % cp_tp;
      cpg = make_group(fmt::format("cp{}.{}", my_group, tp_rank), cp_rank, CP);
      context_parallel.rank = cp_rank;
      context_parallel.size = CP;
      for (int v = 0; v < S; ++v) {  // this group's stages share one split too (their unit's)
        if (is_local(v) && exec.stages[v].cp_split == CpSplit::kBalanced) context_parallel.split = CpSplit::kBalanced;
      }
      context_parallel.ring = [cpg, ring_tag, cp_rank, CP](const torch::Tensor& t) {
        std::vector<at::Tensor> out{t.contiguous()};
        const int tag = (*ring_tag)++ % (1 << 30);
        auto work = SendAsync(*cpg, out, (cp_rank + 1) % CP, tag);
        torch::Tensor in = torch::empty_like(out[0]);
        Recv(*cpg, in, (cp_rank + CP - 1) % CP, tag);
        work->wait();
        return in;
      };
      context_parallel.all_reduce = [cpg](torch::Tensor& t) { AllReduceSum(*cpg, t); };
      context_parallel.all_gather = [cpg](const torch::Tensor& t) { return AllGather(*cpg, t); };
    }
    // This process's stages, built from the same per-layer seeds as any other copy.
    std::map<int, LayerStack> stages;
    std::map<int, std::vector<std::vector<torch::Tensor>>> buckets;  // stage -> its gradient buckets
    for (int v = 0; v < S; ++v) {
      if (!is_local(v)) continue;
      stages.emplace(v, LayerStack(model, exec.stages[v].layers, spec.workload->seed, tensor_parallel.at(tp_of(v)),
                                   context_parallel));
      stages.at(v)->to(device);
      std::vector<torch::Tensor> trainable;  // frozen layers get no optimizer state and no gradient sync
      for (auto& p : stages.at(v)->parameters()) {
        if (p.requires_grad()) trainable.push_back(p);
      }
      buckets[v] = Buckets(trainable, kGradientBuckets);
    }
    // Data-parallel groups (one per communication group this process's GPU
    // group belongs to, in id order on every member, so creation cannot deadlock).
    std::map<int, Group> dp;
    std::map<int, std::pair<int, int>> dp_place;  // group id -> (my index, size)
    // With context parallelism each replica's CP ranks hold the same weights
    // and gradients of different rows: they join the group (dp x cp, as in Megatron).
    // So do a stage's sequence shares.
    std::map<int, int> stage_of_group;  // a stage of each communication group (they share tp and parts)
    for (int v = 0; v < S; ++v) stage_of_group.emplace(exec.stages[v].dp_group, v);
    // Heterogeneous pipeline templates (Oobleck): stage boundaries differ
    // between templates, so gradients are summed per layer segment below,
    // not per stage over its data-parallel group.
    const bool layerwise = spec.plan->units[0].pipelines.size() > 1;
    for (const CommGroup& cg : exec.groups) {
      if (layerwise) break;
      const auto& m = cg.gpu_groups;
      const auto at = std::find(m.begin(), m.end(), my_group);
      const int v = stage_of_group.at(cg.id), parts = G / tp_of(v);
      const int size = static_cast<int>(m.size()) * parts;
      if (at == m.end() || size < 2) continue;
      const int index = static_cast<int>(at - m.begin()) * parts + part_of(v, shard);
      dp[cg.id] = make_group(fmt::format("dp{}.{}", cg.id, tp_rank_of(v, shard)), index, size);
      dp_place[cg.id] = {index, size};
    }
    const int loss_module = static_cast<int>(model.modules.size()) - 1;
    // Megatron's tied word embeddings: where a replica's embedding and tied
    // head are different stages, each holds the matrix and their gradients are
    // summed before the optimizer step (here if this process holds both, else
    // over the pair of processes).
    struct Tie {
      int embedding_stage = -1, head_stage = -1;
      std::vector<torch::Tensor> tensors;  // the copies this process holds
      Group group;
    };
    std::vector<Tie> ties;
    {
      const Module& lm = model.modules[loss_module];
      std::map<std::pair<int, int>, Tie> by_replica;  // (unit, replica) -> its stages
      for (int v = 0; v < S; ++v) {
        for (const auto& r : exec.stages[v].layers) {
          if (r.module != lm.name) continue;
          Tie& t = by_replica[{exec.stages[v].unit, exec.stages[v].replica}];
          if (r.begin == 0) t.embedding_stage = v;
          if (r.end == static_cast<int>(lm.layers.size())) t.head_stage = v;
        }
      }
      if (lm.layers.back().kind == LayerKind::kLmHead && lm.layers.back().tied && !lm.layers[0].frozen) {
        for (auto& [key, t] : by_replica) {
          if (t.embedding_stage < 0 || t.head_stage < 0 || t.embedding_stage == t.head_stage) continue;
          const int re = exec.schedule.stage_rank[t.embedding_stage], rh = exec.schedule.stage_rank[t.head_stage];
          const int pe = process_of(re), ph = process_of(rh);
          if (pe != spec.rank && ph != spec.rank) continue;
          if (pe == spec.rank) t.tensors.push_back(stages.at(t.embedding_stage)->EmbeddingTable());
          if (ph == spec.rank) t.tensors.push_back(stages.at(t.head_stage)->TiedHeadCopy());
          if (pe != ph) {
            t.group = make_group(fmt::format("tie{}.{}.{}.{}", t.embedding_stage, t.head_stage, rho, shard),
                                 pe == spec.rank ? 0 : 1, 2);
          }
          ties.push_back(std::move(t));
        }
      }
    }
    auto holds_tied = [&](int v) {
      for (const auto& t : ties) {
        for (const auto& tensor : t.tensors) {
          for (const auto& p : stages.at(v)->parameters()) {
            if (p.is_same(tensor)) return true;
          }
        }
      }
      return false;
    };
    // ZeRO (the plan's zero_stage with data parallelism), stage by stage:
    //   1: each replica keeps AdamW state for its 1/D slice of every gradient
    //      bucket only, steps that slice and all-gathers the updated weights
    //      (AdamW is elementwise: the replicated update, computed once);
    //   2: the buckets' gradients are reduce-scattered, each replica keeping
    //      the sum of its slice only (the full gradients are dropped);
    //   3 (FSDP): the full weights exist only around the stage's compute
    //      actions: gathered before each forward and backward, their memory
    //      given back after (the slices are the only copy in between).
    // Stages holding a tied embedding keep the replicated optimizer (their
    // gradient is summed with the other copy's at the step, after the buckets).
    std::vector<ShardedBucket> shards;
    std::set<int> sharded, scattered, fsdp;
    for (const auto& [v, stage_buckets] : buckets) {
      const auto place = dp_place.find(exec.stages[v].dp_group);
      if (place == dp_place.end() || exec.stages[v].zero_stage < 1 || holds_tied(v)) continue;
      const auto [index, D] = place->second;
      sharded.insert(v);
      if (exec.stages[v].zero_stage >= 2) scattered.insert(v);
      if (exec.stages[v].zero_stage >= 3) fsdp.insert(v);
      for (size_t b = 0; b < stage_buckets.size(); ++b) {
        if (stage_buckets[b].empty()) continue;
        ShardedBucket sb{v, static_cast<int>(b)};
        for (const auto& p : stage_buckets[b]) sb.total += p.numel();
        sb.chunk = (sb.total + D - 1) / D;
        sb.lo = std::min(sb.total, index * sb.chunk);
        sb.hi = std::min(sb.total, sb.lo + sb.chunk);
        torch::NoGradGuard no_grad;
        sb.master = Flatten(stage_buckets[b]).slice(0, sb.lo, sb.hi).clone().requires_grad_(true);
        shards.push_back(std::move(sb));
      }
    }
    // ZeRO-3: the stage's full weights gathered from every replica's slices
    // (blocking, over its data-parallel group), or given back.
    std::set<int> resident(fsdp.begin(), fsdp.end());
    // One bucket's full weights from every replica's slice (ZeRO-1/2 after
    // each step, ZeRO-3 before each use).
    auto gather_bucket = [&](const ShardedBucket& sb) {
      torch::NoGradGuard no_grad;
      torch::Tensor mine = torch::zeros({sb.chunk}, sb.master.options());
      mine.slice(0, 0, sb.hi - sb.lo).copy_(sb.master);
      const torch::Tensor all =
          torch::cat(AllGather(*dp.at(exec.stages[sb.stage].dp_group), mine, abort)).slice(0, 0, sb.total);
      auto& bucket = buckets.at(sb.stage).at(sb.bucket);
      const auto parts = SplitLike(all, bucket);
      for (size_t i = 0; i < bucket.size(); ++i) {
        if (fsdp.count(sb.stage)) ResizeStorage(bucket[i], bucket[i].numel() * bucket[i].element_size());
        bucket[i].variable_data().copy_(parts[i]);  // not an in-place change autograd's saved graph would reject
      }
    };
    auto gather_weights = [&](int v) {
      for (const ShardedBucket& sb : shards) {
        if (sb.stage == v) gather_bucket(sb);
      }
      resident.insert(v);
    };
    auto release_weights = [&](int v) {
      for (const auto& bucket : buckets.at(v)) {
        for (const auto& p : bucket) ResizeStorage(p, 0);
      }
      resident.erase(v);
    };
    for (int v : fsdp) release_weights(v);
    // Per schedule rank, the optimizers of its stages (a rank's optimizer step
    // updates its own stages only: ranks taking turns on one group step apart).
    // Layer segments (Oobleck, Fig. 2.9): consecutive layers held by the same
    // processes, each summed over them with one all-reduce at the step.
    // Every member creates and reduces the segments in model order, so
    // neither can deadlock.
    struct Segment {
      Group group;
      std::vector<torch::Tensor> params;  // this process's copies
    };
    std::vector<Segment> segments;
    if (layerwise) {
      // The compiled plan's layer segments (plan/compile_plan.cpp): the
      // simulator prices these same all-reduces (SegmentSyncTime_s).
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
          for (int x = 0; x < G; ++x) members.push_back(g * G + x);
        }
        const auto at = std::find(members.begin(), members.end(), spec.rank);
        if (at == members.end() || members.size() < 2) continue;
        segments[k].group = make_group(fmt::format("seg{}", cg.id), static_cast<int>(at - members.begin()),
                                       static_cast<int>(members.size()));
      }
      for (const auto& [v, stack] : stages) {
        for (const auto& item : stack->named_parameters()) {
          if (!item.value().requires_grad()) continue;
          segments[segment_of.at(LayerOfParam(model, item.key()))].params.push_back(item.value());
        }
      }
    }
    struct RankOptimizer {
      std::unique_ptr<torch::optim::AdamW> replicated, sharded;
      std::vector<ShardedBucket*> shards;
    };
    std::map<int, RankOptimizer> optimizers;
    for (int r : local_ranks) {
      std::vector<torch::Tensor> replicated, masters;
      RankOptimizer& o = optimizers[r];
      for (const auto& [v, stage_buckets] : buckets) {
        if (exec.schedule.stage_rank[v] != r || sharded.count(v)) continue;
        for (const auto& bucket : stage_buckets) replicated.insert(replicated.end(), bucket.begin(), bucket.end());
      }
      for (auto& sb : shards) {
        if (exec.schedule.stage_rank[sb.stage] != r) continue;
        masters.push_back(sb.master);
        o.shards.push_back(&sb);
      }
      const auto options = torch::optim::AdamWOptions(spec.options.learning_rate);
      if (!replicated.empty()) o.replicated = std::make_unique<torch::optim::AdamW>(replicated, options);
      if (!masters.empty()) o.sharded = std::make_unique<torch::optim::AdamW>(masters, options);
    }
    const std::vector<Schedule> first_layout{exec.schedule};
    // A fault-tolerant run's training state (runtime/training_state.h): every
    // trainable parameter of this process's stages with its rank's optimizer.
    auto trainable = [&]() {
      std::vector<std::tuple<std::string, torch::Tensor, torch::optim::AdamW*>> out;
      for (auto& [v, stack] : stages) {
        RankOptimizer& o = optimizers.at(exec.schedule.stage_rank[v]);
        for (auto& item : stack->named_parameters()) {
          if (!item.value().requires_grad()) continue;
          if (!o.replicated) {
            throw Error(fmt::format("runtime: parameter {} has no replicated optimizer state to carry", item.key()));
          }
          out.emplace_back(item.key(), item.value(), o.replicated.get());
        }
      }
      return out;
    };
    auto capture_live = [&]() {
      TrainingState state;
      for (auto& [name, p, o] : trainable()) state[name] = CaptureParam(p, *o);
      return state;
    };
    TrainingState snapshot;  // as of the start of step snapshot_step
    int snapshot_step = -1, completed = first_step;
    bool restored = gen == nullptr;
    // Mosaic's engine (§3.2): on CUDA, every local rank whose stage has an SM
    // quota gets a green-context stream, created here once for the whole run
    // (stream-pool pre-creation); a phase's quotas are disjoint partitions.
    // Its actions run on that stream; a rank waits for the ranks its stages
    // exchange tensors with (the event of their last action) before each of
    // its own, so co-located modules of one stage overlap on the GPU.
#ifdef LOOM_HAVE_CUDA
    std::unique_ptr<GreenStreamPool> green;
    std::map<int, c10::cuda::CUDAStream> rank_stream;
    std::map<int, at::cuda::CUDAEvent> rank_done;
    // The schedule's extra orderings (the barriers between temporal phases on
    // shared GPUs, compile_units.cpp): (rank, action) -> ranks it waits for.
    // The host issues actions in an order that honours them; the streams must
    // too, or a later phase's modules run beside an earlier phase's on SMs
    // both were given.
    std::map<std::pair<int, int>, std::vector<int>> waits_for;
    for (const ExtraDep& d : exec.schedule.extra_deps) waits_for[{d.rank, d.index}].push_back(d.after_rank);
    if (cuda && spec.options.sm_quotas) {
      const SmPartitionRules rules = ReadSmPartitionRules(device.index());
      std::map<int, std::vector<std::pair<int, int>>> by_phase;  // phase -> (rank, SMs)
      std::set<int> seen;
      for (int v = 0; v < S; ++v) {
        const int r = exec.schedule.stage_rank[v];
        if (!is_local(v) || seen.count(r) || exec.stages[v].sm_fraction >= 1) continue;
        seen.insert(r);
        by_phase[exec.stages[v].phase].push_back({r, QuotaSms(exec.stages[v].sm_fraction, rules)});
      }
      if (!by_phase.empty()) {
        std::vector<std::vector<int>> sets;
        for (const auto& [phase, list] : by_phase) {
          sets.emplace_back();
          for (const auto& [r, sms] : list) sets.back().push_back(sms);
        }
        green = std::make_unique<GreenStreamPool>(device.index(), sets);
        int s = 0;
        for (const auto& [phase, list] : by_phase) {
          for (size_t i = 0; i < list.size(); ++i) {
            rank_stream.emplace(list[i].first, c10::cuda::getStreamFromExternal(
                                                   static_cast<cudaStream_t>(green->Stream(s, static_cast<int>(i))),
                                                   device.index()));
          }
          Report(fd, fmt::format("note phase {}: {} green context(s) created in {:.3f} ms", phase, list.size(),
                                 green->CreationTime_s(s) * 1e3));
          ++s;
        }
      }
    }
#endif
    // Tensors the steps allocate (activations, gradients, optimizer state), counted exactly.
    std::unique_ptr<TensorMemoryCounter> tensor_memory;
    double weight_bytes = 0;
    try {
    if (gen) {
      // Generation 0 starts from the seed or a checkpoint (`loom run
      // --resume`); a later one from what each worker held, the layers it
      // lacks received from a surviving holder (Oobleck §2.5's copy).
      CheckFaultTolerable(model, *spec.plan);
      std::map<std::string, torch::Tensor> needed;
      for (auto& [name, p, o] : trainable()) needed[name] = p;
      int64_t received = 0;
      if (gen->id == 0 && !gen->resume_from.empty()) gen->carry = LoadLayers(gen->resume_from, model, needed);
      if (gen->id > 0) received = ExchangeState(*pg, model, gen->carry, needed, abort);
      if (gen->id > 0 || !gen->resume_from.empty()) {
        for (auto& [name, p, o] : trainable()) RestoreParam(name, p, *o, gen->carry.at(name));
      }
      gen->carry.clear();
      restored = true;
      Report(fd, fmt::format("ready {} {:.6f} {}", gen->id,
                             std::chrono::duration<double>(std::chrono::steady_clock::now() - gen->commanded).count(),
                             received));
    }
    tensor_memory = std::make_unique<TensorMemoryCounter>();
    weight_bytes = 0;  // held before the counter: added to its peak so it compares with the simulator's
    for (const auto& [v, stack] : stages) {
      for (const auto& item : stack->named_parameters()) {
        weight_bytes += static_cast<double>(item.value().numel() * item.value().element_size());
      }
    }
    for (int step = first_step; step < spec.options.steps; ++step) {
      if (spec.rank == spec.options.kill_rank && step == spec.options.kill_step) _exit(17);  // fault injection
      // Fault-tolerant: the state the step starts from, should it be replayed;
      // what the step reports waits until it commits.
      if (gen) {
        snapshot = capture_live();
        snapshot_step = step;
      }
      std::vector<std::string> step_lines;
      auto report_step = [&](const std::string& line) {
        if (gen) {
          step_lines.push_back(line);
        } else {
          Report(fd, line);
        }
      };
      int actions_run = 0;
      // Fault injection (--kill): SIGKILL, or SIGSTOP for a hang; at the step's
      // end, any count past its actions (after everything, before it commits).
      auto maybe_die = [&](bool at_end) {
        if (!gen) return;
        for (const auto& k : spec.options.kills) {
          if (k.process != spec.birth || k.step != step) continue;
          if (at_end ? k.after_actions < actions_run : k.after_actions != actions_run) continue;
          Report(fd, fmt::format("dying {} {:.9f}", step,
                                 std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
                                     .count()));
          raise(k.hang ? SIGSTOP : SIGKILL);
        }
      };
      // Drawing and compiling the step's batch is the loader's and planner's work:
      // done once, before the step's clock starts.
      if (step > first_step) {
        batch = DrawBatch(*spec.workload, step);
        ExecutionPlan next = CompileForRuntime(model, *spec.cluster, *spec.workload, *spec.plan, batch, schedule_of(step));
        if (next.stages.size() != exec.stages.size() || next.schedule.stage_rank != exec.schedule.stage_rank) {
          throw Error(fmt::format("step {}: the batch's schedule places stages differently from step 0's", step));
        }
        for (size_t v = 0; v < next.stages.size(); ++v) {
          if (next.stages[v].layers != exec.stages[v].layers) {
            throw Error(fmt::format("step {}: stage {} holds other layers than in step 0", step, v));
          }
        }
        exec = std::move(next);
        if (const std::string why = MessageOrderMismatch(exec.schedule); cuda && !why.empty()) {
          throw Error(fmt::format("step {}: NCCL needs messages received in the order they are sent: {}", step, why));
        }
      }
      const Schedule& sch = exec.schedule;
      int M = 0;
      for (int v = 0; v < S; ++v) M = std::max(M, sch.microbatches_of(v));
      const auto order = ProcessOrder(exec, local_ranks);
      const auto handed = StageOutputs(model, exec);
      const auto loss_stage = LossStages(model, exec);
      const auto tower_ends = TowerEnds(model, exec);
      const auto edges = sch.StageEdges();
      std::map<std::pair<int, int>, const StageEdge*> edge_of;
      std::vector<std::vector<const StageEdge*>> in_edges(S), out_edges(S);
      for (const auto& e : edges) {
        edge_of[{e.from, e.to}] = &e;
        in_edges[e.to].push_back(&e);
        out_edges[e.from].push_back(&e);
      }
      // The consumer microbatch a message between two stages goes to.
      auto consumer_of = [&](int from, int to, int mb, int peer_mb) {
        if (peer_mb >= 0) return peer_mb;
        const StageEdge& e = *edge_of.at({from, to});
        return e.first.empty() ? mb : ConsumerOf(e, mb);
      };
      const int64_t batch_text_tokens = BatchTextTokens(batch);
      // Towers beside the loss module: their values in the whole batch (TowerLoss).
      std::map<int, double> tower_values;
      for (const auto& ends : tower_ends) {
        for (int m : ends) {
          if (tower_values.count(m)) continue;
          std::vector<int> all(batch.samples.size());
          std::iota(all.begin(), all.end(), 0);
          const int64_t tokens = PackMicrobatch(model, batch, all).Tokens(m);
          tower_values[m] = static_cast<double>(std::max<int64_t>(1, tokens)) *
                            static_cast<double>(OutputWidth(model, m, static_cast<int>(model.modules[m].layers.size()) - 1));
        }
      }
      auto tower_loss = [&](int v, const ModuleTensors& out) {
        torch::Tensor sum;
        for (int m : tower_ends[v]) {
          const torch::Tensor t = TowerLoss(out.at(m), tower_values.at(m));
          sum = sum.defined() ? sum + t : t;
        }
        return sum;
      };
      // What (stage, mb) holds on a part of its group: every piece, or its
      // sequence share's contiguous run of them.
      auto pieces_of = [&](int v, int k, int part) {
        const auto& all = exec.replicas[content][v][k].pieces;
        if (!shares(v)) return all;
        const int n = exec.stages[v].seq_share;
        const auto cut = SplitEven(std::vector<int>(all.size()), n);
        size_t begin = 0;
        for (int i = 0; i < part; ++i) begin += cut[i].size();
        if (cut[part].empty()) {
          throw Error(fmt::format("runtime: stage {} ({}) microbatch {} has {} sample piece(s) for {} GPUs sharing "
                                  "its sequences",
                                  v, exec.stages[v].label, k, all.size(), n));
        }
        return PieceList(std::span<const SamplePiece>(all.begin() + begin, cut[part].size()));
      };
      std::map<std::tuple<int, int, int>, MicrobatchPacking> packings;  // (stage, mb, part), as needed
      auto packing_at = [&](int v, int k, int part) -> const MicrobatchPacking& {
        auto it = packings.find({v, k, part});
        if (it == packings.end()) {
          it = packings.emplace(std::make_tuple(v, k, part), PackMicrobatch(model, batch, pieces_of(v, k, part))).first;
        }
        return it->second;
      };
      auto packing = [&](int v, int k) -> const MicrobatchPacking& { return packing_at(v, k, part_of(v, shard)); };
      // Which processes of two stages' groups exchange a message: the
      // consumer's TP shard reads the producer shard it maps to; the parts
      // pair one to one, or by shared samples where a stage shares sequences.
      auto samples_of = [&](int v, int k, int part) {
        std::set<int> out;
        for (const auto& piece : pieces_of(v, k, part)) out.insert(piece.sample);
        return out;
      };
      auto paired = [&](int u, int j, int pu, int w, int c, int pw) {
        if (!shares(u) && !shares(w)) return pu == pw;
        const auto a = samples_of(u, j, pu), b = samples_of(w, c, pw);
        return std::any_of(a.begin(), a.end(), [&](int x) { return b.count(x) > 0; });
      };
      auto input_of = [&](int v, int k) {
        return MicrobatchInput{&packing(v, k), step, static_cast<int64_t>(batch.samples.size()), device};
      };
      // The flat size of what (stage, mb) hands on.
      auto shapes_of = [&](int v, int k, int part) {
        std::vector<torch::Tensor> shapes;
        for (const auto& b : handed[v]) {
          shapes.push_back(torch::empty({1, packing_at(v, k, part).Tokens(b.module), b.width}, device));
        }
        return shapes;
      };
      const auto t0 = std::chrono::steady_clock::now();
      // Per (stage, mb): what it hands on (the loss, on a loss stage), in
      // StageOutputs order; the messages it read; weight gradients the W pass owes.
      std::map<std::pair<int, int>, std::vector<torch::Tensor>> output;
      std::map<std::pair<int, int>, std::set<Message*>> read;
      std::map<MessageKey, Message> messages;                  // received activations, by message
      std::map<MessageKey, torch::Tensor> grads_in;            // received gradients (flat), by message
      std::map<MessageKey, torch::Tensor> mailbox_act, mailbox_grad;  // between ranks of this process
      std::map<std::pair<int, int>, std::vector<WeightGradDeferral::Pending>> deferred;
      // The step's loss terms, read (.item()) only once the step is done: a read
      // waits for the device, and one after a module's forward would keep the
      // host from launching a co-located module beside it.
      std::vector<torch::Tensor> loss_terms;
      bool holds_loss = false;
      std::map<std::pair<int, int>, torch::Tensor> tower_losses;  // (stage, mb) -> its towers' loss (not the loss stage)
      std::vector<std::pair<int, int>> stepping;  // (rank, action index) of this process's optimizer steps
      // Sends and gradient all-reduces in flight (the communication stream):
      // their buffers live until the step's end and the wait.
      std::vector<std::pair<WorkHandle, std::vector<at::Tensor>>> sending;
      std::vector<std::tuple<WorkHandle, std::vector<at::Tensor>, int, int>> reducing;  // (work, flat, stage, bucket)
      const bool last_step = step + 1 == spec.options.steps;
#ifdef LOOM_HAVE_CUDA
      // On CUDA the host only enqueues: the last step's compute actions are
      // timed by events on their streams (a rank's green stream or the
      // default one), read after the step's synchronisation, from an event
      // recorded as the step starts (t0 plus one synchronisation). Host
      // times would show launches, not the GPU's work.
      struct GpuInterval {
        std::string prefix;  // "iv INSTANCE COMM INDEX"
        at::cuda::CUDAEvent begin{cudaEventDefault}, end{cudaEventDefault};
      };
      std::vector<std::unique_ptr<GpuInterval>> gpu_intervals;
      std::optional<at::cuda::CUDAEvent> step_begin;
      if (cuda && last_step) {
        torch::cuda::synchronize(device.index());
        step_begin.emplace(cudaEventDefault);
        step_begin->record(c10::cuda::getCurrentCUDAStream(device.index()));
      }
#endif
      auto make_message = [&](int u, int j, int part, const torch::Tensor& flat) {
        Message m;
        for (const auto& b : handed[u]) m.modules.push_back(b.module);
        for (auto& t : SplitLike(flat, shapes_of(u, j, part))) m.leaves.push_back(t.clone().requires_grad_(true));
        m.packing = &packing_at(u, j, part);
        return m;
      };
      auto gradient_of = [&](Message& m, const MessageKey& key) {
        if (m.finished != m.users) {
          throw Error(fmt::format("runtime: the gradient of stage {} microbatch {} goes back to stage {} before every "
                                  "consumer microbatch that read it finished its backward ({} of {}); the schedule "
                                  "sends it too early",
                                  key.to, key.consumer, key.from, m.finished, m.users));
        }
        std::vector<torch::Tensor> parts;
        for (const auto& t : m.leaves) parts.push_back(t.grad().defined() ? t.grad() : torch::zeros_like(t));
        return parts;
      };
      for (const auto& [r, index] : order) {
        maybe_die(false);
        ++actions_run;
        const Action& a = sch.ranks[r][index];
        const int v = a.stage, k = a.microbatch;
        if (a.is_compute() && fsdp.count(v) && !resident.count(v)) gather_weights(v);
#ifdef LOOM_HAVE_CUDA
        // On its green stream, after the tensors it reads from co-located ranks.
        std::optional<c10::cuda::CUDAStreamGuard> on_stream;
        struct RecordAtEnd {
          std::function<void()> record;
          ~RecordAtEnd() {
            if (record) record();
          }
        } record_at_end;
        if (green && a.is_compute()) {
          const c10::cuda::CUDAStream mine =
              rank_stream.count(r) ? rank_stream.at(r) : c10::cuda::getDefaultCUDAStream(device.index());
          for (const auto* list : {&in_edges[v], &out_edges[v]}) {
            for (const StageEdge* e : *list) {
              const int peer = sch.stage_rank[e->from == v ? e->to : e->from];
              if (peer != r && rank_done.count(peer)) rank_done.at(peer).block(mine);
            }
          }
          // Its peer's latest event: at or after the action it waits for,
          // which the host issued first.
          if (auto w = waits_for.find({r, index}); w != waits_for.end()) {
            for (int peer : w->second) {
              if (peer != r && rank_done.count(peer)) rank_done.at(peer).block(mine);
            }
          }
          on_stream.emplace(mine);
          record_at_end.record = [&rank_done, r, mine] { rank_done[r].record(mine); };
        }
#endif
        const double began_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
#ifdef LOOM_HAVE_CUDA
        GpuInterval* timing = nullptr;
        if (step_begin && shard == 0 && a.is_compute()) {
          gpu_intervals.push_back(std::make_unique<GpuInterval>());
          timing = gpu_intervals.back().get();
          timing->prefix = fmt::format("iv {} 0 {}", layout.Instance({r, rho}), index);
          timing->begin.record(c10::cuda::getCurrentCUDAStream(device.index()));
        }
#endif
        switch (a.kind) {
          case ActionKind::kForward: {
            ModuleTensors in;
            const std::string where = fmt::format("stage {} ({}) microbatch {}", v, exec.stages[v].label, k);
            if (!in_edges[v].empty()) {
              std::vector<Message*> own, pool;
              std::map<int, int64_t> widths;  // modules arriving -> width
              for (const StageEdge* e : in_edges[v]) {
                const int u = e->from;
                for (const auto& b : handed[u]) widths[b.module] = b.width;
                for (int j : Producers(*e, k)) {
                  if (sch.stage_rank[u] == r) {  // the producer is this rank: cut the graph here
                    const MessageKey key{u, v, j, k, part_of(u, shard)};
                    if (!messages.count(key)) {
                      std::vector<torch::Tensor> parts;
                      for (const auto& t : output.at({u, j})) parts.push_back(t.detach());
                      messages.emplace(key, make_message(u, j, key.part, Flatten(parts, device)));
                    }
                  }
                  bool any = false;  // one message per producer part it pairs with
                  for (auto it = messages.lower_bound(MessageKey{u, v, j, k, 0});
                       it != messages.end() && it->first.from == u && it->first.to == v && it->first.mb == j &&
                       it->first.consumer == k;
                       ++it) {
                    own.push_back(&it->second);
                    any = true;
                  }
                  if (!any) {
                    throw Error(fmt::format("runtime: {} runs before stage {} microbatch {} reached it", where, u, j));
                  }
                }
                for (auto& [key, m] : messages) {
                  if (key.from == u && key.to == v) pool.push_back(&m);
                }
              }
              std::set<Message*>& used = read[{v, k}];
              used.insert(own.begin(), own.end());
              for (const auto& [module, width] : widths) {
                in[module] = Assemble(module, width, packing(v, k), own, pool, used, where, device);
              }
              for (Message* m : used) ++m->users;
            }
            const MicrobatchInput mb = input_of(v, k);
            ModuleTensors out = stages.at(v)->forward(in, mb, LayerRecompute(exec, content, v, k));
            std::vector<torch::Tensor>& hands = output[{v, k}];
            const torch::Tensor towers = tower_loss(v, out);
            if (loss_stage[v]) {
              torch::Tensor loss =
                  TextLoss(out.at(loss_module), mb, batch_text_tokens,
                           CP > 1 ? ContextRows(packing(v, k), loss_module, cp_rank, CP, context_parallel.split)
                                  : std::vector<int64_t>{});
              if (towers.defined()) loss = loss + towers;
              loss_terms.push_back(loss.detach());
              holds_loss = true;
              hands.push_back(loss);
            } else {
              for (const auto& b : handed[v]) hands.push_back(out.at(b.module));
              if (towers.defined()) {
                loss_terms.push_back(towers.detach());
                holds_loss = true;
                tower_losses[{v, k}] = towers;
              }
            }
            break;
          }
          case ActionKind::kBackward:
          case ActionKind::kBackwardData: {
            std::vector<torch::Tensor> outs, grads;
            const auto& hands = output.at({v, k});
            if (loss_stage[v]) {
              outs = hands;
              grads.push_back(torch::ones_like(hands[0]));
            } else {
              // The gradient of each handed tensor: summed over every consumer microbatch it went to.
              std::vector<torch::Tensor> g(hands.size());
              auto add = [&](const std::vector<torch::Tensor>& parts) {
                for (size_t i = 0; i < hands.size(); ++i) g[i] = g[i].defined() ? g[i] + parts[i] : parts[i];
              };
              for (const StageEdge* e : out_edges[v]) {
                const int x = e->to;
                for (int c : Consumers(*e, k, sch.microbatches_of(x))) {
                  if (sch.stage_rank[x] == r) {
                    const MessageKey key{v, x, k, c, part_of(v, shard)};
                    auto m = messages.find(key);
                    if (m != messages.end()) add(gradient_of(m->second, key));  // else never read
                    continue;
                  }
                  // From every consumer process this one sends to (see kRecv).
                  for (int q = 0; q < G; ++q) {
                    if (tp_rank_of(x, q) != tp_rank_of(v, shard) % tp_of(x) ||
                        !paired(v, k, part_of(v, shard), x, c, part_of(x, q))) {
                      continue;
                    }
                    auto flat = grads_in.find(MessageKey{v, x, k, c, part_of(x, q)});
                    if (flat == grads_in.end()) {
                      throw Error(fmt::format("runtime: stage {} microbatch {} runs its backward before the gradient "
                                              "from stage {} microbatch {} arrived",
                                              v, k, x, c));
                    }
                    add(SplitLike(flat->second, hands));
                  }
                }
              }
              for (size_t i = 0; i < hands.size(); ++i) {
                if (hands[i].requires_grad() && g[i].defined()) {
                  outs.push_back(hands[i]);
                  grads.push_back(g[i]);
                }
              }
              if (auto t = tower_losses.find({v, k}); t != tower_losses.end()) {
                if (t->second.requires_grad()) {
                  outs.push_back(t->second);
                  grads.push_back(torch::ones_like(t->second));
                }
                tower_losses.erase(t);
              }
            }
            if (!outs.empty()) {  // frozen layers fed by nothing trainable: no backward at all
              WeightGradDeferral& deferral = stages.at(v)->deferral();
              deferral.active = a.kind == ActionKind::kBackwardData;  // ZB: weight gradients wait for W
              torch::autograd::backward(outs, grads);
              deferral.active = false;
              if (!deferral.pending.empty()) deferred[{v, k}] = std::move(deferral.pending);
              deferral.pending.clear();
            }
            output.erase({v, k});  // the graph is spent
            for (Message* m : read[{v, k}]) ++m->finished;
            break;
          }
          case ActionKind::kBackwardWeight:
            if (auto d = deferred.find({v, k}); d != deferred.end()) {
              ApplyWeightGradients(d->second);
              deferred.erase(d);
            }
            break;
          case ActionKind::kSend: {
            // Activations: producer v -> consumer `to`, to each process of its
            // group that reads this one's part; gradients: consumer v ->
            // producer `to`, to each process whose part this one read.
            const bool act = a.payload == Payload::kActivation;
            const int to = a.peer_stage >= 0 ? a.peer_stage : (act ? v + 1 : v - 1);
            const int u = act ? v : to, w = act ? to : v;
            const int c = consumer_of(u, w, k, a.peer_microbatch);
            const int mine = part_of(v, shard);
            torch::Tensor flat;
            if (act) {
              std::vector<torch::Tensor> parts;
              for (const auto& t : output.at({v, k})) parts.push_back(t.detach());
              flat = Flatten(parts, device);
            }
            for (int q = 0; q < G; ++q) {
              const int theirs = part_of(to, q);
              const bool pair = act ? tp_rank_of(to, q) % tp_of(v) == tp_rank_of(v, shard) && paired(u, k, mine, w, c, theirs)
                                    : tp_rank_of(v, shard) == tp_rank_of(to, q) % tp_of(v) &&
                                          paired(u, k, theirs, w, c, mine);
              if (!pair) continue;
              const MessageKey key{u, w, k, c, mine};
              if (!act) {
                const MessageKey read_key{u, w, k, c, theirs};
                flat = Flatten(gradient_of(messages.at(read_key), read_key), device);
              }
              const int peer = group_of(a.peer) * G + q;
              if (peer == spec.rank) {  // a rank of this process: hand it over
                (act ? mailbox_act : mailbox_grad)[key] = flat;
                continue;
              }
              sending.emplace_back(WorkHandle(), std::vector<at::Tensor>{flat});
              sending.back().first = SendAsync(*pg, sending.back().second, peer, Tag(a.payload, key, S, M, G));
            }
            break;
          }
          case ActionKind::kRecv: {
            const bool act = a.payload == Payload::kActivation;
            const int here = a.peer_stage >= 0 ? a.peer_stage : (act ? v + 1 : v - 1);
            const int u = act ? v : here, w = act ? here : v;
            const int c = consumer_of(u, w, k, a.peer_microbatch);
            const int mine = part_of(here, shard);
            for (int p = 0; p < G; ++p) {
              const int theirs = part_of(v, p);
              const bool pair = act ? tp_rank_of(v, p) == tp_rank_of(here, shard) % tp_of(v) &&
                                          paired(u, k, theirs, w, c, mine)
                                    : tp_rank_of(v, p) == tp_rank_of(here, shard) % tp_of(v) &&
                                          paired(u, k, mine, w, c, theirs);
              if (!pair) continue;
              const MessageKey key{u, w, k, c, theirs};
              const int peer = group_of(a.peer) * G + p;
              torch::Tensor flat;
              if (peer == spec.rank) {
                auto& box = act ? mailbox_act : mailbox_grad;
                auto found = box.find(key);
                if (found == box.end()) {
                  throw Error(fmt::format("runtime: stage {} microbatch {}: a message between ranks {} and {} of this "
                                          "process is received before it is sent",
                                          v, k, a.peer, r));
                }
                flat = found->second;
                box.erase(found);
              } else {
                // Shapes follow from the producer microbatch's packing on the producer's part.
                int64_t numel = 0;
                for (const auto& t : shapes_of(u, k, act ? theirs : mine)) numel += t.numel();
                flat = torch::empty({numel}, device);
                Recv(*pg, flat, peer, Tag(a.payload, key, S, M, G), abort);
              }
              if (act) {
                messages[key] = make_message(u, k, theirs, flat);
              } else {
                grads_in[key] = flat;
              }
            }
            break;
          }
          case ActionKind::kCollective: {
            // One bucket of the stage's gradients summed over its data-parallel
            // group (each replica's loss is its share of the global batch's
            // mean, so the sum is the global gradient); asynchronous, finished
            // at the wait.
            const int group = a.group >= 0 ? a.group : exec.stages[v].dp_group;
            auto g = dp.find(group);
            if (g == dp.end()) break;
            const auto& bucket = buckets.at(v).at(a.bucket);
            if (bucket.empty()) break;
            std::vector<torch::Tensor> grads;
            for (const auto& p : bucket) grads.push_back(p.grad().defined() ? p.grad() : torch::zeros_like(p));
            if (scattered.count(v)) {  // ZeRO-2/3: each replica gets the sum of its slice only
              const int D = dp_place.at(group).second;
              torch::Tensor flat = Flatten(grads);
              const int64_t chunk = (flat.numel() + D - 1) / D;
              torch::Tensor padded = torch::zeros({chunk * D}, flat.options());
              padded.slice(0, 0, flat.numel()).copy_(flat);
              for (const auto& p : bucket) p.mutable_grad() = torch::Tensor();  // the full gradients are not kept
              reducing.emplace_back(WorkHandle(), std::vector<at::Tensor>{padded, torch::empty_like(padded)}, v,
                                    a.bucket);
              auto& bufs = std::get<1>(reducing.back());
              std::get<0>(reducing.back()) = ReduceScatterAsync(*g->second, bufs[0], bufs[1]);
              break;
            }
            reducing.emplace_back(WorkHandle(), std::vector<at::Tensor>{Flatten(grads)}, v, a.bucket);
            std::get<0>(reducing.back()) = AllReduceAsync(*g->second, std::get<1>(reducing.back()));
            break;
          }
          case ActionKind::kWait:
            // This rank's gradient all-reduces (another rank of this process
            // may have its own in flight). Sends are not waited for here: a
            // send completes only once its receiver posts the receive, which
            // may come after this rank's wait in the receiver's order.
            for (auto& [work, flat, stage, b] : reducing) {
              if (sch.stage_rank[stage] != r) continue;
              Await(work, abort);
              auto& bucket = buckets.at(stage).at(b);
              if (sharded.count(stage)) {  // only this replica's slice is stepped here
                for (auto& sb : shards) {
                  if (sb.stage != stage || sb.bucket != b) continue;
                  if (scattered.count(stage)) {  // the all-to-all's chunks from every member, summed
                    const int64_t D = static_cast<int64_t>(flat[1].numel() / sb.chunk);
                    sb.master.mutable_grad() = flat[1].view({D, sb.chunk}).sum(0).slice(0, 0, sb.hi - sb.lo).clone();
                  } else {
                    sb.master.mutable_grad() = flat[0].slice(0, sb.lo, sb.hi).clone();
                  }
                }
                continue;
              }
              const auto parts = SplitLike(flat[0], bucket);
              for (size_t i = 0; i < bucket.size(); ++i) {
                if (!bucket[i].grad().defined()) bucket[i].mutable_grad() = torch::zeros_like(bucket[i]);
                bucket[i].mutable_grad().copy_(parts[i]);
              }
            }
            reducing.erase(std::remove_if(reducing.begin(), reducing.end(),
                                          [&](const auto& x) { return sch.stage_rank[std::get<2>(x)] == r; }),
                           reducing.end());
            break;
          case ActionKind::kOptimizerStep:
            // Run after every other action of this process (below): the tied
            // embedding's sum and ZeRO's gathers are collectives that a
            // partner process reaches only at its own end.
            stepping.push_back({r, index});
            continue;
        }
        if (a.is_compute() && fsdp.count(v)) release_weights(v);
        // What ran, for the trace: the simulator's recorded kinds (compute, the
        // communication stream, the optimizer step; sends are asynchronous: their issue).
#ifdef LOOM_HAVE_CUDA
        if (timing != nullptr) {
          timing->end.record(c10::cuda::getCurrentCUDAStream(device.index()));
          continue;  // reported after the step's synchronisation
        }
#endif
        if (last_step && shard == 0 &&
            (a.is_compute() || a.on_comm_stream())) {
          const double ended_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          report_step(fmt::format("iv {} {} {} {:.9g} {:.9g}", layout.Instance({r, rho}),
                                  a.on_comm_stream() ? 1 : 0, index, began_s, ended_s));
        }
      }
#ifdef LOOM_HAVE_CUDA
      if (green) torch::cuda::synchronize(device.index());  // gradients from every green stream
#endif
      // Optimizer steps: the tied embeddings' gradient sums first (in tie
      // order, as every partner), then each rank's AdamW, then ZeRO's gathers
      // in group order (every member of a group reaches them in that order).
      if (!stepping.empty()) {
        const double began_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        bool stepping_gpu_timed = false;
#ifdef LOOM_HAVE_CUDA
        // The optimizer steps run on the current stream: timed by events too.
        std::vector<GpuInterval*> stepping_timing;
        if (step_begin && shard == 0) {
          for (const auto& [r, index] : stepping) {
            gpu_intervals.push_back(std::make_unique<GpuInterval>());
            stepping_timing.push_back(gpu_intervals.back().get());
            stepping_timing.back()->prefix = fmt::format("iv {} 0 {}", layout.Instance({r, rho}), index);
            stepping_timing.back()->begin.record(c10::cuda::getCurrentCUDAStream(device.index()));
          }
        }
#endif
        for (const Tie& t : ties) {
          torch::NoGradGuard no_grad;
          torch::Tensor sum = torch::zeros_like(t.tensors[0]);
          for (const auto& x : t.tensors) {
            if (x.grad().defined()) sum += x.grad();
          }
          if (t.group) AllReduceSum(*t.group, sum, abort);
          for (auto x : t.tensors) x.mutable_grad() = sum.clone();
        }
        for (Segment& seg : segments) {  // Oobleck's layer-wise sync, in model order
          if (!seg.group || seg.params.empty()) continue;
          torch::NoGradGuard no_grad;
          std::vector<torch::Tensor> grads;
          for (auto& p : seg.params) {
            if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
            grads.push_back(p.grad());
          }
          torch::Tensor flat = Flatten(grads);
          AllReduceSum(*seg.group, flat, abort);
          const auto parts = SplitLike(flat, seg.params);
          for (size_t i = 0; i < seg.params.size(); ++i) seg.params[i].mutable_grad().copy_(parts[i]);
        }
        std::vector<const ShardedBucket*> gathers;
        for (const auto& [r, index] : stepping) {
          RankOptimizer& o = optimizers.at(r);
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
          return exec.stages[a->stage].dp_group < exec.stages[b->stage].dp_group;
        });
        for (const ShardedBucket* sb : gathers) {
          if (fsdp.count(sb->stage)) continue;  // ZeRO-3 gathers at the next use
          gather_bucket(*sb);
          for (auto& p : buckets.at(sb->stage).at(sb->bucket)) p.mutable_grad() = torch::Tensor();
        }
        const double ended_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
#ifdef LOOM_HAVE_CUDA
        for (GpuInterval* timing : stepping_timing) {
          timing->end.record(c10::cuda::getCurrentCUDAStream(device.index()));
        }
        stepping_gpu_timed = !stepping_timing.empty();  // reported with the other GPU intervals
#endif
        if (last_step && shard == 0 && !stepping_gpu_timed) {
          for (const auto& [r, index] : stepping) {
            report_step(fmt::format("iv {} 0 {} {:.9g} {:.9g}", layout.Instance({r, rho}), index, began_s, ended_s));
          }
        }
      }
      for (auto& [work, buffers] : sending) AwaitMessage(work, abort);  // every receiver has posted its receive by now
#ifdef LOOM_HAVE_CUDA
      // The step ends when the GPU has done its work, not when the host has
      // enqueued it (the loss's read synchronises only up to the forward).
      if (cuda) torch::cuda::synchronize(device.index());
#endif
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
#ifdef LOOM_HAVE_CUDA
      try {
        for (const auto& iv : gpu_intervals) {
          if (!iv->end.isCreated()) continue;  // an action that ended early enqueued nothing
          report_step(fmt::format("{} {:.9g} {:.9g}", iv->prefix, step_begin->elapsed_time(iv->begin) * 1e-3,
                                  step_begin->elapsed_time(iv->end) * 1e-3));
        }
      } catch (const std::exception& e) {
        Report(fd, fmt::format("note the last step's GPU timing failed ({}); its trace is incomplete", e.what()));
      }
#endif
      report_step(fmt::format("time {} {:.9g}", step, secs));
      bool reports = holds_loss;  // TP shards compute the same loss; CP ranks and sequence shares their parts
      for (int v = 0; v < S; ++v) {
        reports = reports && !((loss_stage[v] || !tower_ends[v].empty()) && is_local(v) && tp_rank_of(v, shard) != 0);
      }
      if (reports) {
        double loss_sum = 0;
        for (const auto& t : loss_terms) loss_sum += t.item<double>();
        report_step(fmt::format("loss {} {:.17g}", step, loss_sum));
      }
      maybe_die(true);
      if (gen) {  // lockstep: the next step starts once every worker finished this one
        completed = step + 1;
        Report(fd, fmt::format("done {} {}", gen->id, step));
        if (!gen->control->WaitReleased(step + 1)) {
          // A command that resumes after this step: it committed (a node joins).
          const std::optional<ControlCommand> command = gen->control->Pending();
          if (command && command->kind != ControlCommand::Kind::kExit && command->step == step + 1) {
            for (const auto& line : step_lines) Report(fd, line);
          }
          throw Aborted();
        }
        for (const auto& line : step_lines) Report(fd, line);
        // --checkpoint-every: the state after this step, before the next starts.
        if (const std::string dir = gen->control->CheckpointBefore(step + 1); !dir.empty()) {
          SaveLayers(dir, model, capture_live());
          Report(fd, fmt::format("saved {} {}", gen->id, step + 1));
        }
      }
    }
    } catch (const std::exception& e) {
      if (!gen) throw;
      // A dead peer makes c10d fail here, often before the launcher's command
      // arrives: wait for it (the launcher notices within its heartbeat timeout).
      if (dynamic_cast<const Aborted*>(&e) == nullptr) {
        const auto until = std::chrono::steady_clock::now() +
                           std::chrono::duration<double>(spec.options.heartbeat_timeout_s + 5);
        while (!gen->control->abort && std::chrono::steady_clock::now() < until) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        if (!gen->control->abort) throw;
      }
      const std::optional<ControlCommand> command = gen->control->Pending();
      if (!command || command->kind == ControlCommand::Kind::kExit) throw Error("runtime: the launcher is gone");
      if (!restored) throw Reconfigure{};  // gen->carry is still the state as of first_step
      // The state as of the command's step: the live one if this worker
      // finished every step before it, else the snapshot its step began with.
      const int c = command->step;
      if (completed == c) {
        gen->carry = capture_live();
      } else if (snapshot_step == c) {
        gen->carry = std::move(snapshot);
      } else {
        throw Error(fmt::format("runtime: the launcher resumes from step {}, but this worker finished {} step(s) and "
                                "holds a snapshot of step {}",
                                c, completed, snapshot_step));
      }
      throw Reconfigure{};
    }
    // Peak resident memory of this process (CPU: the allocator's high-water mark
    // is the RSS peak; ru_maxrss is in KiB on Linux).
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    // On a GPU: the caching allocator's peak of allocated bytes instead.
    Report(fd, fmt::format("mem {}", cuda ? CudaPeakAllocatedBytes(device.index())
                                          : static_cast<double>(usage.ru_maxrss) * 1024.0));
    Report(fd, fmt::format("tmem {}", weight_bytes + static_cast<double>(tensor_memory->peak_bytes())));
    // The weights of every unit's replica 0 (every replica holds the same
    // after the sync), frozen ones too (they must come back unchanged); a
    // sharded weight's statistics are summed over its TP shards, so they
    // describe the whole tensor.
    for (int v : fsdp) gather_weights(v);  // every replica, in stage order
    for (const auto& [v, stack] : stages) {
      const bool first_copy = (exec.replicated ? rho : exec.stages[v].replica) == 0;
      for (const auto& item : stack->named_parameters()) {
        const torch::Tensor& w = item.value();
        torch::Tensor stats = torch::tensor(
            {w.sum().item<double>(), w.pow(2).sum().item<double>(), w.abs().sum().item<double>()}, torch::kDouble);
        const std::string& name = item.key();
        if (name.size() >= 10 && name.compare(name.size() - 10, 10, "tied_table") == 0) continue;  // a copy
        if (stack->IsSharded(name)) AllReduceSum(*tp_groups.at(tp_of(v)), stats);
        if (first_copy && shard == 0) {
          Report(fd, fmt::format("param {:.17g} {:.17g} {:.17g}", stats[0].item<double>(), stats[1].item<double>(),
                                 stats[2].item<double>()));
        }
      }
    }
  }
}

// A fault-tolerant run's worker: generation after generation, as its
// launcher commands (runtime/fault_tolerance.h).
int RunGenerations(const WorkerSpec& first, int fd) {
  signal(SIGPIPE, SIG_IGN);  // a dead peer's socket fails the write, not this process
  WorkerControl control(first.control_fd, fd, first.options.heartbeat_s);
  Generation gen;
  gen.control = &control;
  gen.store = MakeStore(first.options.master_addr, 0, 0, first.port, first.options.timeout_s, /*client_only=*/true);
  gen.id = first.generation;
  gen.first_step = first.first_step;
  gen.resume_from = first.options.resume_from;
  WorkerSpec spec = first;
  Plan plan = *first.plan;
  Cluster cluster = *first.cluster;
  spec.plan = &plan;
  spec.cluster = &cluster;
  while (true) {
    try {
      RunGeneration(spec, fd, &gen);
      return 0;
    } catch (const Reconfigure&) {
    } catch (const std::exception&) {
      if (!control.abort) throw;  // setup failed under a command: the carry is unchanged
    }
    const ControlCommand c = control.TakePending();
    if (c.kind == ControlCommand::Kind::kExit) return 4;
    if (c.kind == ControlCommand::Kind::kStop) {
      SaveLayers(c.path, *spec.model, gen.carry);
      Report(fd, fmt::format("stopped {}", c.step));
      return 0;
    }
    gen.commanded = std::chrono::steady_clock::now();
    gen.id = c.generation;
    gen.first_step = c.step;
    plan = LoadPlan(c.path);
    cluster.nodes = c.nodes;
    spec.rank = c.rank;
    spec.world = c.world;
  }
}

}  // namespace

int RunWorker(const WorkerSpec& spec, int fd) {
  try {
    if (spec.control_fd >= 0) return RunGenerations(spec, fd);
    RunGeneration(spec, fd, nullptr);
    return 0;
  } catch (const std::exception& e) {
    std::string msg = e.what();
    for (char& c : msg) c = c == '\n' ? ' ' : c;
    Report(fd, "error " + msg);
    return 3;
  } catch (const Reconfigure&) {
    Report(fd, "error runtime: a reconfiguration outside a fault-tolerant run");
    return 3;
  }
}

}  // namespace loom::runtime
