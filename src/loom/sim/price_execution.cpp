#include "loom/sim/price_execution.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "loom/cost/collectives.h"
#include "loom/cost/cost_model.h"
#include "loom/cost/memory.h"
#include "loom/error.h"
#include "loom/plan/compile_plan.h"
#include "loom/plan/sequence_parallel_handoff.h"

namespace loom {

namespace {

// The key of a microbatch's pieces in the token memo.
std::vector<std::pair<int, int>> PiecesKey(std::span<const SamplePiece> pieces) {
  std::vector<std::pair<int, int>> key;
  key.reserve(pieces.size());
  for (const auto& p : pieces) key.push_back({p.sample, p.item});
  return key;
}

// Per module, per layer: the index of the module's first layer equal to it
// with equal backward needs. PriceStage reads nothing else of a layer, so two
// stages whose ranges hold the same classes in the same order cost the same,
// bit for bit, wherever they cut the module: a transformer's blocks 0-3 and
// 40-43 are one price.
std::vector<std::vector<int>> LayerClasses(const Model& model, const std::vector<std::vector<BackwardNeeds>>& needs) {
  std::vector<std::vector<int>> out(model.modules.size());
  for (size_t mi = 0; mi < model.modules.size(); ++mi) {
    const auto& layers = model.modules[mi].layers;
    const auto same = [&](size_t a, size_t b) {
      return layers[a] == layers[b] && needs[mi][a].data == needs[mi][b].data &&
             needs[mi][a].weight == needs[mi][b].weight;
    };
    std::vector<int> firsts;  // one layer per class
    out[mi].resize(layers.size());
    for (size_t li = 0; li < layers.size(); ++li) {
      if (li > 0 && same(li, li - 1)) {
        out[mi][li] = out[mi][li - 1];
        continue;
      }
      const auto it = std::find_if(firsts.begin(), firsts.end(), [&](int f) { return same(li, f); });
      out[mi][li] = it == firsts.end() ? static_cast<int>(li) : *it;
      if (it == firsts.end()) firsts.push_back(static_cast<int>(li));
    }
  }
  return out;
}

// Everything PriceStage reads from a stage, as text: two stages with equal
// signatures cost the same on the same microbatch. Layers appear as their
// classes, run-length encoded, not as positions (LayerClasses).
std::string PricingSignature(const Model& model, const ExecStage& st, Precision precision,
                             const std::vector<std::vector<int>>& classes) {
  std::string s = fmt::format("{} {} {} {} {} {} {:a} {} {} {}|", st.tp, st.cp, st.seq_share, st.dp * st.gpus,
                              st.zero_stage, static_cast<int>(st.recompute), st.sm_fraction,
                              st.sequence_parallel ? 1 : 0, static_cast<int>(precision), static_cast<int>(st.cp_split));
  for (const auto& r : st.layers) {
    const int mi = model.FindModule(r.module);
    s += fmt::format("{}:", mi);
    for (int li = r.begin; li < r.end;) {
      int end = li + 1;
      while (end < r.end && classes[mi][end] == classes[mi][li]) ++end;
      s += fmt::format("{}*{} ", classes[mi][li], end - li);
      li = end;
    }
    s += ',';
  }
  return s;
}

// Adds one replica's costs: a replica whose stage costs equal an earlier one's
// only raises that one's weight.
void AddReplica(ExecutionCosts& out, PipelineCosts costs, std::map<std::vector<double>, int>& seen) {
  std::vector<double> signature;
  for (const auto& stage : costs.stage) {
    for (const StageCost& sc : stage) {
      signature.insert(signature.end(),
                       {sc.forward_s, sc.backward_data_s, sc.backward_weight_s, sc.activation_bytes, sc.transient_bytes,
                        sc.weight_grad_hold_bytes, sc.split_backward_transient_bytes, sc.send_bytes});
    }
  }
  auto [pos, inserted] = seen.emplace(std::move(signature), static_cast<int>(out.replicas.size()));
  out.entry_of.push_back(pos->second);
  if (inserted) {
    out.replicas.push_back(std::move(costs));
    out.replica_weight.push_back(1);
  } else {
    ++out.replica_weight[pos->second];
  }
}

// Whether `stage` runs layer `layer` of module `m`.
bool StageRuns(const ExecStage& stage, const Module& m, int layer) {
  for (const auto& r : stage.layers) {
    if (r.module == m.name && r.begin <= layer && layer < r.end) return true;
  }
  return false;
}

// A tied LM head (tie_word_embeddings) shares its matrix with its module's
// embedding (LayerParams counts it there, once). On a stage without that
// embedding it holds a copy, with its own gradient and optimizer state,
// whose gradient is summed with the embedding's before each step (Megatron's
// shared word embeddings on the last pipeline stage; the runtime's tied copy).
int64_t TiedCopyParams(const ExecStage& stage, const Module& m, const Layer& l) {
  if (l.kind != LayerKind::kLmHead || !l.tied) return 0;
  for (int li = 0; li < static_cast<int>(m.layers.size()); ++li) {
    if (m.layers[li].kind == LayerKind::kEmbedding) return StageRuns(stage, m, li) ? 0 : l.vocab * l.hidden;
  }
  return 0;
}

// A patch embedding's learned extra tokens (CLIP's class embedding,
// register tokens: Module's tokens.extra_tokens rows of its width), which the
// layer alone does not know of; whole on every TP rank, as the embedding.
int64_t ExtraTokenParams(const Module& m, const Layer& l) {
  return l.kind == LayerKind::kPatchEmbed ? m.tokens.extra_tokens * l.hidden : 0;
}

}  // namespace

double PinnedEmbeddingBytes(const Model& model, const ExecStage& st, Precision precision,
                            std::vector<LayerTimes>* priced) {
  if (st.zero_stage != 3 || st.dp * st.gpus / st.tp <= 1) return 0;
  size_t at = 0;  // the embedding's index in `priced` (stage order)
  for (const auto& r : st.layers) {
    const Module& m = model.modules[model.FindModule(r.module)];
    for (int li = r.begin; li < r.end; ++li, ++at) {
      const Layer& l = m.layers[li];
      if (l.kind != LayerKind::kEmbedding || l.frozen) continue;
      const bool tied_head_here = std::any_of(m.layers.begin(), m.layers.end(), [&](const Layer& h) {
        return h.kind == LayerKind::kLmHead && h.tied && StageRuns(st, m, static_cast<int>(&h - m.layers.data()));
      });
      if (!tied_head_here) continue;
      const int tp = SplitsOverTensorParallel(m, st.tp) ? st.tp : 1;
      const double unit = (ElementBytes(precision) + kGradBytesPerParam) * LayerParamsOnTpRank(l, tp);
      (*priced)[at].transient_bytes = std::max(0.0, (*priced)[at].transient_bytes - unit);
      return unit;
    }
  }
  return 0;
}

StageParams StageParamsOf(const Model& model, const ExecStage& stage) {
  StageParams p;
  for (const auto& r : stage.layers) {
    const Module& m = model.modules[model.FindModule(r.module)];
    const bool split = SplitsOverTensorParallel(m, stage.tp);
    for (int li = r.begin; li < r.end; ++li) {
      const Layer& l = m.layers[li];
      // A TP rank's share (LayerParamsOnTpRank: norms, row-parallel biases and
      // patch embeddings whole on each), or every parameter where the module is replicated.
      const double tied = static_cast<double>(TiedCopyParams(stage, m, l));
      const double extra = static_cast<double>(ExtraTokenParams(m, l));
      const double params = split ? LayerParamsOnTpRank(l, stage.tp) + tied / stage.tp + extra
                                  : static_cast<double>(LayerParams(l)) + tied + extra;
      (l.frozen ? p.frozen : p.trainable) += params;
      if (!split && !l.frozen) p.replicated += params;
    }
  }
  return p;
}

// TP-split weights sync over the D replicas x the group members sharing
// sequences x CP (TP ranks stride apart), replicated weights over every GPU of
// the replicas. ZeRO-3 reduce-scatters inside each layer instead (layer_pricing.h).
double GradSyncTime_s(const StageParams& params, const ExecStage& st, Precision precision, const Cluster& c) {
  if (st.zero_stage == 3) return 0;
  const double elem = ElementBytes(precision);
  return GroupAllReduceTime_s(elem * (params.trainable - params.replicated), st.dp * st.seq_share * st.cp, st.tp, c) +
         GroupAllReduceTime_s(elem * params.replicated, st.dp * st.gpus, 1, c);
}

double SegmentSyncTime_s(const Model& model, const ExecutionPlan& exec, const ExecStage& stage, const Cluster& c) {
  double total_s = 0;
  for (int id : stage.segment_groups) {
    const CommGroup& g = exec.groups[id];
    ExecStage part = stage;  // the stage's share of the segment's layers
    part.layers.clear();
    for (const auto& r : stage.layers) {
      for (const auto& q : g.layers) {
        if (q.module != r.module) continue;
        const int lo = std::max(r.begin, q.begin), hi = std::min(r.end, q.end);
        if (lo < hi) part.layers.push_back({r.module, lo, hi});
      }
    }
    const int n = static_cast<int>(g.gpu_groups.size()) * exec.group_gpus;
    if (part.layers.empty() || n < 2) continue;
    // Its holders lie on different pipelines: the mean distance between them.
    const int stride = std::max(1, (g.gpu_groups.back() - g.gpu_groups.front()) * exec.group_gpus /
                                       std::max<int>(1, static_cast<int>(g.gpu_groups.size()) - 1));
    total_s += GroupAllReduceTime_s(ElementBytes(exec.precision) * StageParamsOf(model, part).trainable, n, stride, c);
  }
  return total_s;
}

double CpImbalanceOfModule(const Model& model, int module, int cp, CpSplit split, int tp, const Batch& batch,
                           int sm_count, std::span<const SamplePiece> pieces) {
  if (cp <= 1 || split == CpSplit::kIdeal) return 1.0;
  constexpr int64_t kBlockTokens = 128;  // Cornstarch's N_B
  const Module& mod = model.modules[module];
  const bool causal = std::any_of(mod.layers.begin(), mod.layers.end(), [](const Layer& l) { return l.causal; });
  // One row per document: Megatron-LM's packed ("thd") CP splits each
  // sequence on its own, as the runtime's ContextRows does. The row's mask
  // is the one the runtime applies: the module's bitfield mask, else
  // document attention (causal or not) over all its tokens.
  std::vector<std::vector<MaskSegment>> rows;
  for (const auto& p : pieces) {
    std::map<int, std::vector<MaskSegment>> docs;
    for (const auto& seg : ModuleMaskSegments(model, module, PieceSample(batch, p))) docs[seg.doc].push_back(seg);
    for (auto& [doc, segments] : docs) {
      if (mod.bitfield_attention) {
        rows.push_back(std::move(segments));
        continue;
      }
      int64_t tokens = 0;
      for (const auto& seg : segments) tokens += seg.tokens;
      rows.push_back(DocumentSegments({tokens}, causal));
    }
  }
  // Cornstarch's kernel cuts long rows into sub-blocks over the GPU's SMs.
  KernelShape kernel;
  for (const Layer& l : mod.layers) {
    if (l.heads > 0) {
      kernel.heads = std::max<int64_t>(1, l.heads / tp);
      break;
    }
  }
  kernel.units = sm_count;
  return CpImbalance(rows, MaskLayout::kEmbedded, cp, split, kBlockTokens, sm_count > 0 ? &kernel : nullptr);
}

std::vector<double> CpImbalanceOf(const Model& model, const ExecStage& stage, const Batch& batch, int sm_count,
                                  std::span<const SamplePiece> pieces) {
  std::vector<double> out(model.modules.size(), 1.0);
  if (stage.cp <= 1 || stage.cp_split == CpSplit::kIdeal) return out;
  for (const auto& r : stage.layers) {
    const int mi = model.FindModule(r.module);
    out[mi] = CpImbalanceOfModule(model, mi, stage.cp, stage.cp_split, stage.tp, batch, sm_count, pieces);
  }
  return out;
}

StageCost PriceStage(const Model& model, const Cluster& c, const ExecStage& st, const std::vector<TokenStats>& tokens,
                     const std::vector<Recompute>& layer_recompute,
                     const std::vector<std::vector<BackwardNeeds>>& needs, Precision precision, double* flops,
                     std::vector<std::array<LayerTimes, 3>>* options, const std::vector<double>* cp_imbalance) {
  StageCost sc;
  const SmSharing sharing = c.cost_model ? c.cost_model->sm_sharing() : SmSharing{};
  int layer = 0, last_module = -1, last_layer = -1;
  std::vector<LayerTimes> priced;  // per layer in stage order, for the backward's peaks
  for (const auto& r : st.layers) {
    const int mi = model.FindModule(r.module);
    const Module& mod = model.modules[mi];
    LayerParallelism par;
    par.tp = st.tp;
    par.cp = st.cp;
    if (cp_imbalance != nullptr) par.cp_imbalance = (*cp_imbalance)[mi];
    par.cp_split = st.cp_split;
    par.split = SplitsOverTensorParallel(mod, st.tp);
    par.fsdp = st.zero_stage == 3;
    par.fsdp_ranks = st.dp * st.gpus / st.tp;
    par.precision = precision;
    par.sequence_parallel = st.sequence_parallel;
    const TokenStats t = ShareOfSequences(tokens[mi], st.seq_share);
    // A run of identical layers (a transformer's blocks) with the same
    // backward needs and recomputation costs the same per layer: priced once.
    LayerTimes lt;
    Recompute priced_rc = Recompute::kNone;
    for (int li = r.begin; li < r.end; ++li, ++layer) {
      const Recompute rc = layer_recompute.empty() ? st.recompute : layer_recompute[layer];
      const BackwardNeeds& nd = needs[mi][li];
      const bool same = li > r.begin && mod.layers[li] == mod.layers[li - 1] && rc == priced_rc &&
                        nd.data == needs[mi][li - 1].data && nd.weight == needs[mi][li - 1].weight;
      if (!same) {
        par.recompute = priced_rc = rc;
        lt = PriceLayer(mod.layers[li], t, nd, c, par);
      }
      // Mosaic §3.3: on a share of the SMs, never under the host's launch floor.
      sc.forward_s += sharing.PhaseTime_s(lt.forward_s, st.sm_fraction);
      sc.backward_data_s += sharing.PhaseTime_s(lt.backward_data_s, st.sm_fraction);
      sc.backward_weight_s += sharing.PhaseTime_s(lt.backward_weight_s, st.sm_fraction);
      sc.forward_wait_s += lt.forward_wait_s;
      sc.backward_wait_s += lt.backward_wait_s;
      sc.activation_bytes += lt.activation_bytes;
      sc.weight_grad_hold_bytes += lt.weight_grad_hold_bytes;
      priced.push_back(lt);
      if (flops != nullptr) *flops += lt.flops;
      if (options != nullptr) {
        auto& choices = options->emplace_back();
        for (Recompute rc : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
          par.recompute = rc;
          choices[static_cast<int>(rc)] = PriceLayer(mod.layers[li], t, needs[mi][li], c, par);
        }
      }
      last_module = mi;
      last_layer = li;
    }
  }
  // First: it takes the pinned unit out of the embedding's entry, which both backwards then read.
  const double pinned = PinnedEmbeddingBytes(model, st, precision, &priced);
  sc.transient_bytes = BackwardTransientBytes(priced) + pinned;
  sc.split_backward_transient_bytes = SplitBackwardTransientBytes(priced) + pinned;
  sc.send_bytes = ElementBytes(precision) * tokens[last_module].tokens / (st.cp * st.seq_share) *
                  OutWidth(model.modules[last_module].layers[last_layer]);
  return sc;
}

namespace {

// Mosaic's co-located modules (stages of one phase with SM quotas on the same
// GPU group) are launched by one host thread per GPU (Loom's engine and the
// H100 measurements alike): none of them finishes a microbatch before the
// launch floors of all of them are spent (cost/sm_sharing.h; the solver's
// StageEval adds the same floors up). Eq. 8's bandwidth terms are applied by
// the solver only (the shipped H100 profile fits none).
void ShareTheHost(const ExecutionPlan& exec, const Cluster& c, PipelineCosts* pc) {
  const double floor_s = c.cost_model ? c.cost_model->sm_sharing().launch_floor_s_per_layer : 0;
  if (floor_s <= 0) return;  // (a replicated plan's ranks: every replica shares its hosts alike)
  const Schedule& sch = exec.schedule;
  std::map<std::pair<int, int>, std::vector<int>> on;  // (phase, group) -> stages with SM quotas
  for (int s = 0; s < sch.num_stages(); ++s) {
    const ExecStage& st = exec.stages[s];
    if (st.sm_fraction >= 1) continue;
    const ExecRank& r = exec.ranks[sch.stage_rank[s]];
    for (int g = r.group; g < r.group + r.num_groups; ++g) on[{st.phase, g}].push_back(s);
  }
  std::vector<double> host_s(sch.num_stages(), 0.0);  // per stage: the floors it waits behind
  for (const auto& [key, stages] : on) {
    if (stages.size() < 2) continue;
    double sum = 0;
    for (int s : stages) sum += floor_s * exec.stages[s].num_layers();
    for (int s : stages) host_s[s] = std::max(host_s[s], sum);
  }
  for (int s = 0; s < sch.num_stages(); ++s) {
    if (host_s[s] <= 0) continue;
    for (StageCost& cost : pc->stage[s]) {
      const double t = cost.forward_s + cost.backward_data_s + cost.backward_weight_s;
      if (t <= 0 || t >= host_s[s]) continue;
      const double stretch = host_s[s] / t;
      cost.forward_s *= stretch;
      cost.backward_data_s *= stretch;
      cost.backward_weight_s *= stretch;
    }
  }
}

}  // namespace

void PricingMemo::Bind(const Model& model, const Cluster* cluster, const Batch& batch) {
  if (model_ == nullptr) {
    model_ = &model;
    batch_ = &batch;
    needs_ = ComputeBackwardNeeds(model);
    classes_ = LayerClasses(model, needs_);
  } else if (model_ != &model || batch_ != &batch) {
    throw Error("PriceExecution: a PricingMemo was used with another model or batch");
  }
  if (cluster != nullptr) {
    if (cluster_ == nullptr) {
      cluster_ = cluster;
    } else if (cluster_ != cluster) {
      throw Error("PriceExecution: a PricingMemo was used with another cluster");
    }
  }
  if (stages_.size() > kMaxEntries || tokens_.size() > kMaxEntries || imbalance_.size() > kMaxEntries) {
    token_ids_.clear();
    tokens_.clear();
    stage_ids_.clear();
    stages_.clear();
    imbalance_.clear();
  }
}

double PricingMemo::ModuleImbalance(const Model& model, const Batch& batch, int sm_count, int token_id,
                                    std::span<const SamplePiece> pieces, int module, const ExecStage& stage) {
  const ImbalanceKey key{token_id, module, stage.cp, static_cast<int>(stage.cp_split), stage.tp};
  if (auto found = imbalance_.find(key); found != imbalance_.end()) return found->second;
  const double v = CpImbalanceOfModule(model, module, stage.cp, stage.cp_split, stage.tp, batch, sm_count, pieces);
  imbalance_.emplace(key, v);
  return v;
}

int PricingMemo::TokenId(const Model& model, const Batch& batch, std::span<const SamplePiece> pieces) {
  std::vector<std::pair<int, int>> key = PiecesKey(pieces);
  if (auto found = token_ids_.find(key); found != token_ids_.end()) return found->second;
  std::vector<Sample> items;  // pieces that are one item of a sample (whole samples are not copied)
  items.reserve(pieces.size());
  std::vector<const Sample*> samples;
  samples.reserve(pieces.size());
  for (const auto& p : pieces) {
    if (p.item < 0) {
      samples.push_back(&batch.samples.at(p.sample));
    } else {
      items.push_back(PieceSample(batch, p));
      samples.push_back(&items.back());
    }
  }
  tokens_.push_back(CountModuleTokens(model, samples));
  const int id = static_cast<int>(tokens_.size()) - 1;
  token_ids_.emplace(std::move(key), id);
  return id;
}

int HeaviestReplica(const ExecutionPlan& exec, const Model& model, const Batch& batch, PricingMemo* memo) {
  PricingMemo local;
  if (memo == nullptr) memo = &local;
  memo->Bind(model, nullptr, batch);
  int best = 0;
  double best_tokens = -1;
  for (size_t d = 0; d < exec.replicas.size(); ++d) {
    double tokens = 0;
    for (const auto& stage : exec.replicas[d]) {
      for (const MicrobatchWork& mb : stage) {
        for (const TokenStats& t : memo->tokens_[memo->TokenId(model, batch, mb.pieces)]) tokens += t.tokens;
      }
      break;  // a stage's microbatches hold the replica's samples (every stage sees them all)
    }
    if (tokens > best_tokens) {
      best_tokens = tokens;
      best = static_cast<int>(d);
    }
  }
  return best;
}

ExecutionCosts PriceExecution(const ExecutionPlan& exec, const Model& model, const Cluster& c, const Batch& batch,
                              LayerOptions* options, PricingMemo* memo, int only_replica) {
  const Schedule& sch = exec.schedule;
  const int S = sch.num_stages();
  // Stage prices are kept even without a caller's memo: stages holding the
  // same layer classes (LayerClasses) share them, so a pipeline of many
  // one-block stages prices a microbatch a few times, not once per stage.
  PricingMemo local;  // without a caller's memo, one for this call (microbatches shared by stages)
  if (memo == nullptr) memo = &local;
  memo->Bind(model, &c, batch);
  const auto& needs = memo->needs_;
  auto token_id = [&](std::span<const SamplePiece> pieces) { return memo->TokenId(model, batch, pieces); };
  std::vector<int> stage_id(S);
  for (int s = 0; s < S; ++s) {
    const std::string sig = PricingSignature(model, exec.stages[s], exec.precision, memo->classes_);
    stage_id[s] = memo->stage_ids_.emplace(sig, static_cast<int>(memo->stage_ids_.size())).first->second;
  }
  ExecutionCosts out;
  std::vector<double> module_tokens(model.modules.size(), 0.0);
  if (options != nullptr) options->at.assign(S, {});

  // Static memory and gradient sync per stage (the same for every replica).
  std::vector<double> static_bytes(sch.num_ranks, 0.0), grad_sync_s(S, 0.0), step_params(sch.num_ranks, 0.0);
  std::vector<double> backward_grad_bytes(S, 0.0);
  for (int s = 0; s < S; ++s) {
    const ExecStage& st = exec.stages[s];
    const StageParams sp = StageParamsOf(model, st);
    const int shards = st.dp * st.seq_share * st.cp;
    const ModelStateBytes state = ModelState(sp.trainable, sp.frozen, shards, st.zero_stage, exec.precision);
    static_bytes[sch.stage_rank[s]] += state.total();
    if (st.zero_stage == 2 && shards > 1) {  // whole from the first backward to the sync (PipelineCosts)
      backward_grad_bytes[s] = ModelState(sp.trainable, sp.frozen, shards, 1, exec.precision).grads - state.grads;
    }
    grad_sync_s[s] =
        st.segment_groups.empty() ? GradSyncTime_s(sp, st, exec.precision, c) : SegmentSyncTime_s(model, exec, st, c);
    step_params[sch.stage_rank[s]] += OptimizerStepParams(sp.trainable, shards, st.zero_stage);
  }
  // Each rank's fused Adam step streams its (ZeRO-sharded) optimizer state
  // through HBM; stages sharing a rank at a fraction of its SMs still share its
  // memory bandwidth, so the step is priced at full bandwidth.
  std::vector<double> optimizer_s(sch.num_ranks, 0.0);
  for (int r = 0; r < sch.num_ranks; ++r) {
    optimizer_s[r] =
        CostModelOf(c).ElementwiseTime_s(step_params[r] * OptimizerStepBytesPerParam(exec.precision), c.gpu);
  }

  // Per stage, the modules whose first layer it runs: each module's tokens
  // are counted once, there.
  std::vector<std::vector<int>> first_layer_modules(S);
  for (int s = 0; s < S; ++s) {
    for (const auto& r : exec.stages[s].layers) {
      if (r.begin == 0) first_layer_modules[s].push_back(model.FindModule(r.module));
    }
  }
  // Under sequence parallelism each TP rank sends its own rows on (plan/sequence_parallel_handoff.h).
  std::vector<double> send_share(S, 1.0);
  const std::vector<bool> hands_rows = SequenceParallelHandoffsOf(model, exec).out;
  for (int s = 0; s < S; ++s) {
    if (hands_rows[s]) send_share[s] = 1.0 / exec.stages[s].tp;
  }
  std::map<std::vector<double>, int> seen;
  for (size_t d = 0; d < exec.replicas.size(); ++d) {
    if (only_replica >= 0 && static_cast<int>(d) != only_replica) continue;
    PipelineCosts pc;
    pc.p2p = c.LinkForSpan(2 * exec.group_gpus);
    pc.static_bytes = static_bytes;
    if (std::any_of(backward_grad_bytes.begin(), backward_grad_bytes.end(), [](double b) { return b > 0; })) {
      pc.backward_grad_bytes = backward_grad_bytes;  // (empty: nothing for RankMemory to add)
    }
    pc.grad_sync_s = grad_sync_s;
    pc.optimizer_s = optimizer_s;
    pc.stage.assign(S, {});
    // Stages of a pipeline usually see the same pieces per microbatch: reuse the id.
    std::vector<std::pair<const PieceList*, int>> last_token_id;
    for (int s = 0; s < S; ++s) {
      const ExecStage& st = exec.stages[s];
      const bool want_options = options != nullptr && d == 0;
      if (want_options) options->at[s].assign(exec.replicas[d][s].size(), {});
      for (size_t j = 0; j < exec.replicas[d][s].size(); ++j) {
        const MicrobatchWork& mb = exec.replicas[d][s][j];
        if (last_token_id.size() <= j) last_token_id.resize(j + 1, {nullptr, -1});
        auto& [last_pieces, tid] = last_token_id[j];
        if (last_pieces == nullptr || *last_pieces != mb.pieces) tid = token_id(mb.pieces);
        last_pieces = &mb.pieces;
        const auto& tokens = memo->tokens_[tid];
        double flops = 0;
        // Only CP stages priced from their masks carry an imbalance (the pricing loop is a search's hot path).
        const bool masked = st.cp > 1 && st.cp_split != CpSplit::kIdeal;
        const bool cacheable = mb.layer_recompute.empty() && !want_options;
        const uint64_t key = (static_cast<uint64_t>(stage_id[s]) << 32) | static_cast<uint32_t>(tid);
        bool found = false;
        if (cacheable) {
          if (auto hit = memo->stages_.find(key); hit != memo->stages_.end()) {
            ++memo->stage_hits_;
            pc.stage[s].push_back(hit->second.cost);
            flops = hit->second.flops;
            found = true;
          }
        }
        if (!found) {
          std::vector<double> imbalance;
          if (masked) {
            // Per module, not per stage: candidates cut the same modules into
            // many different stages, and the mask walk dominates CP pricing.
            imbalance.assign(model.modules.size(), 1.0);
            for (const auto& r : st.layers) {
              const int mi = model.FindModule(r.module);
              imbalance[mi] = memo->ModuleImbalance(model, batch, c.gpu.sm_count, tid, mb.pieces, mi, st);
            }
          }
          pc.stage[s].push_back(PriceStage(model, c, st, tokens, mb.layer_recompute, needs, exec.precision, &flops,
                                           want_options ? &options->at[s][j] : nullptr, masked ? &imbalance : nullptr));
          if (cacheable) {
            ++memo->stage_misses_;
            memo->stages_.emplace(key, PricingMemo::Priced{pc.stage[s].back(), flops});
          }
        }
        pc.stage[s].back().send_bytes *= send_share[s];
        out.model_flops += flops * st.gpus;
        for (int mi : first_layer_modules[s]) module_tokens[mi] += tokens[mi].tokens;
      }
    }
    ShareTheHost(exec, c, &pc);
    if (exec.replicated) {
      AddReplica(out, std::move(pc), seen);
    } else {
      out.entry_of.push_back(static_cast<int>(out.replicas.size()));
      out.replicas.push_back(std::move(pc));
      out.replica_weight.push_back(1);
    }
  }
  out.tokens = module_tokens.empty() ? 0 : *std::max_element(module_tokens.begin(), module_tokens.end());
  return out;
}

}  // namespace loom
