#include "loom/export/torchtitan_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <vector>

namespace loom {

namespace {

// torchtitan's Llama module names for layers [begin, end) of Loom's LLM
// module (0 the embedding, 1..N its blocks, N + 1 the final norm and head):
// tok_embeddings, layers.K, norm and output.
std::vector<std::string> StageFqns(const Module& llm, int begin, int end) {
  std::vector<std::string> fqns;
  int block = 0;
  for (int l = 0; l < static_cast<int>(llm.layers.size()); ++l) {
    const LayerKind kind = llm.layers[l].kind;
    const bool in = l >= begin && l < end;
    if (kind == LayerKind::kEmbedding && in) fqns.push_back("tok_embeddings");
    if (kind == LayerKind::kTransformer) {
      if (in) fqns.push_back(fmt::format("layers.{}", block));
      ++block;
    }
    if (kind == LayerKind::kLmHead && in) {
      fqns.push_back("norm");
      fqns.push_back("output");
    }
  }
  return fqns;
}

// A Python string literal of `s` (a path): backslashes and quotes escaped.
std::string PyString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '\\' || c == '"') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string PyList(const std::vector<std::string>& items) {
  std::vector<std::string> quoted;
  for (const auto& s : items) quoted.push_back("\"" + s + "\"");
  return fmt::format("[{}]", fmt::join(quoted, ", "));
}

}  // namespace

TorchtitanExport ExportTorchtitan(const ExecutionPlan& exec, const PytorchExport& csv, const Model& model,
                                  const TorchtitanOptions& options) {
  TorchtitanExport out;
  if (model.modules.size() != 1 || model.modules[0].role != ModuleRole::kBackbone) {
    out.notes = fmt::format(
        "model {} has {} modules; torchtitan's pipeline split names one LLM's modules (tok_embeddings, "
        "layers.K, norm, output), and its VLM pipelines place the encoder by their own rule",
        model.name, model.modules.size());
    return out;
  }
  const int pp = exec.schedule.num_ranks, stages = exec.schedule.num_stages();
  for (int v = 0; v < stages; ++v) {
    if (csv.stage_rank[v] != v % pp) {
      out.notes = fmt::format(
          "stage {} is on rank {}; torchtitan places stage v on rank v mod {} for a CSV schedule ("
          "PipelineScheduleMulti's \"loop\" style)",
          v, csv.stage_rank[v], pp);
      return out;
    }
  }
  const ExecStage& first = exec.stages[0];
  std::vector<std::string> parts, notes;
  for (int v = 0; v < stages; ++v) {
    const ExecStage& st = exec.stages[v];
    if (st.layers.size() != 1) {
      out.notes = fmt::format("stage {} holds {} layer ranges; torchtitan's stages are one run of modules", v,
                              st.layers.size());
      return out;
    }
    if (st.seq_share > 1) {
      out.notes =
          fmt::format("stage {} splits sequences over {} GPUs beside TP and CP; torchtitan does not", v, st.seq_share);
      return out;
    }
    parts.push_back(PyList(StageFqns(model.modules[0], st.layers[0].begin, st.layers[0].end)));
  }
  // ZeRO: torchtitan shards with FSDP2 (stage 3) or replicates with DDP (no optimizer sharding).
  const bool shard = first.zero_stage == 3;
  if (first.dp > 1 && (first.zero_stage == 1 || first.zero_stage == 2)) {
    notes.push_back(fmt::format(
        "the plan shards optimizer state (ZeRO-{}); torchtitan replicates (DDP) or shards everything (FSDP2): "
        "DDP here, with the full optimizer state on every rank",
        first.zero_stage));
  }
  std::string ac;
  if (first.recompute == Recompute::kFull) ac = "    config.activation_checkpoint = FullAC.Config()\n";
  if (first.recompute == Recompute::kSelective) ac = "    config.activation_checkpoint = SelectiveAC.Config()\n";
  const size_t colon = options.base.find(':');
  const std::string base_module = colon == std::string::npos ? options.base : options.base.substr(0, colon);
  const std::string base_config = colon == std::string::npos ? "" : options.base.substr(colon + 1);
  const int64_t dp = first.dp;
  out.expressible = true;
  out.python = fmt::format(
      R"(# torchtitan configuration of a Loom plan (strategy {strategy}, model {model}).
# Run: NGPU={gpus} MODULE=<this module> CONFIG=loom_plan ./run_train.sh
# Base recipe {base}: use the recipe of your model (its module names must be tok_embeddings, layers.K, norm, output).
from importlib import import_module

from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC

SCHEDULE_CSV = {csv}


def loom_plan():
    config = getattr(import_module("{base_module}"), "{base_config}")()
    p = config.parallelism
    p.tensor_parallel_degree = {tp}
    p.context_parallel_degree = {cp}
    p.pipeline_parallel_degree = {pp}
    p.data_parallel_shard_degree = {shard_dp}
    p.data_parallel_replicate_degree = {replicate_dp}
    p.num_pp_microbatches = {m}
    # Stage v on rank v mod {pp}: torchtitan's "loop" placement, which PipelineScheduleMulti names.
    p.pipeline_parallel_schedule = "PipelineScheduleMulti"
    p.pipeline_parallel_schedule_csv = SCHEDULE_CSV
    p.module_fqns_per_model_part = [
        {parts},
    ]
    config.training.num_tokens_per_microbatch_per_dp_rank = {tokens}
    config.training.max_context_length = {context}
{ac}    return config
)",
      fmt::arg("strategy", exec.strategy), fmt::arg("model", model.name),
      fmt::arg("gpus", static_cast<int64_t>(first.tp) * first.cp * pp * dp), fmt::arg("base", options.base),
      fmt::arg("csv", PyString(options.csv_path)), fmt::arg("base_module", base_module),
      fmt::arg("base_config", base_config), fmt::arg("tp", first.tp), fmt::arg("cp", first.cp), fmt::arg("pp", pp),
      fmt::arg("shard_dp", shard ? dp : 1), fmt::arg("replicate_dp", shard ? 1 : dp),
      fmt::arg("m", csv.num_microbatches), fmt::arg("parts", fmt::join(parts, ",\n        ")),
      fmt::arg("tokens", options.tokens_per_microbatch), fmt::arg("context", options.max_context_tokens),
      fmt::arg("ac", ac));
  out.notes = notes.empty() ? "" : fmt::format("Differs from the plan: {}.", fmt::join(notes, "; "));
  return out;
}

}  // namespace loom
