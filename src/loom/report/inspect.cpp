#include "loom/report/inspect.h"

#include <fmt/format.h>

#include "loom/cost/device_time.h"
#include "loom/cost/module_summary.h"
#include "loom/data/sample_source.h"
#include "loom/report/table.h"
#include "loom/spec/zoo.h"

namespace loom {

std::string FormatModelList() {
  TextTable t({"model", "modules", "params", "description"});
  for (const auto& name : ZooModelNames()) {
    Model m = LoadModel(name);
    std::string mods;
    for (const auto& mod : m.modules) {
      mods += (mods.empty() ? "" : "+") + mod.name;
    }
    std::string desc = m.description.size() > 72 ? m.description.substr(0, 69) + "..." : m.description;
    t.AddRow({name, mods, HumanCount(static_cast<double>(ModelParams(m))), desc});
  }
  return t.Render();
}

nlohmann::json InspectModel(const Model& model, const InspectOptions& options) {
  Workload w;
  if (options.workload) {
    w = *options.workload;
  } else {
    w = DefaultWorkload(model);
  }
  int64_t n = std::min<int64_t>(w.global_batch, options.max_samples);
  Batch batch;
  if (options.image_px) {
    n = 1;
    Sample one;
    const int doc = one.AddDoc(0);
    ImageInput image;
    image.width_px = options.image_px->first;
    image.height_px = options.image_px->second;
    image.doc = doc;
    one.images.push_back(image);
    batch.samples.push_back(std::move(one));
  } else {
    batch = MakeSampleSource(w.source)->Draw(n, w.seed, 0);
  }
  std::vector<ModuleSummary> summary = SummarizeModules(model, batch.samples);
  std::vector<TokenStats> tokens = CountModuleTokens(model, batch.samples);

  nlohmann::json out;
  out["model"] = model.name;
  out["params"] = ModelParams(model);
  out["workload"] =
      options.image_px ? fmt::format("one {}x{} image", options.image_px->first, options.image_px->second) : w.name;
  out["samples"] = n;
  if (options.image_px) out["image_px"] = {options.image_px->first, options.image_px->second};
  if (!model.planning_only.empty()) out["planning_only"] = model.planning_only;
  if (options.cluster) {
    out["gpu"] = options.cluster->gpu.name;
  }
  out["modules"] = nlohmann::json::array();
  for (size_t i = 0; i < model.modules.size(); ++i) {
    const Module& m = model.modules[i];
    const ModuleSummary& s = summary[i];
    nlohmann::json j;
    j["name"] = m.name;
    j["role"] = std::string(ModuleRoleName(m.role));
    j["modality"] = std::string(ModalityName(m.modality));
    j["layers"] = m.layers.size();
    j["hidden"] = s.hidden;
    j["params"] = s.params;
    j["frozen"] = m.frozen;
    j["tokens"] = s.tokens.tokens / static_cast<double>(n);
    j["sequences"] = s.tokens.sequences / static_cast<double>(n);
    j["fwd_flops"] = s.fwd_flops / static_cast<double>(n);
    j["compute_intensity"] = s.compute_intensity();
    if (options.cluster) {
      double t = 0;
      for (const auto& l : m.layers) {
        t += PhaseTime_s(EstimateLayerWork(l, tokens[i], 1), Phase::kForward, options.cluster->gpu, Efficiency());
      }
      j["fwd_time_s"] = t / static_cast<double>(n);
    }
    out["modules"].push_back(j);
  }
  return out;
}

std::string FormatInspect(const nlohmann::json& in) {
  bool timed = in.contains("gpu");
  std::vector<std::string> header = {"module",           "role",      "modality",      "layers",
                                     "hidden",           "params",    "tokens/sample", "seqs/sample",
                                     "fwd TFLOP/sample", "FLOP/byte", "frozen"};
  if (timed) {
    header.push_back(fmt::format("fwd ms/sample ({})", in["gpu"].get<std::string>()));
  }
  TextTable t(header);
  double flops = 0, time_s = 0;
  for (const auto& m : in["modules"]) {
    std::vector<std::string> row = {m["name"],
                                    m["role"],
                                    m["modality"],
                                    fmt::format("{}", m["layers"].get<int>()),
                                    fmt::format("{}", m["hidden"].get<int64_t>()),
                                    HumanCount(m["params"].get<double>()),
                                    fmt::format("{:.0f}", m["tokens"].get<double>()),
                                    fmt::format("{:.1f}", m["sequences"].get<double>()),
                                    fmt::format("{:.3f}", m["fwd_flops"].get<double>() / 1e12),
                                    fmt::format("{:.1f}", m["compute_intensity"].get<double>()),
                                    m["frozen"].get<bool>() ? "yes" : "no"};
    flops += m["fwd_flops"].get<double>();
    if (timed) {
      row.push_back(fmt::format("{:.2f}", m["fwd_time_s"].get<double>() * 1e3));
      time_s += m["fwd_time_s"].get<double>();
    }
    t.AddRow(row);
  }
  t.AddRule();
  std::vector<std::string> total = {
      "total", "", "", "", "", HumanCount(in["params"].get<double>()), "", "", fmt::format("{:.3f}", flops / 1e12),
      "",      ""};
  if (timed) {
    total.push_back(fmt::format("{:.2f}", time_s * 1e3));
  }
  t.AddRow(total);
  const std::string what = in.contains("image_px")
                               ? fmt::format("tokens of {} and no text", in["workload"].get<std::string>())
                               : fmt::format("workload {} (mean of {} samples)", in["workload"].get<std::string>(),
                                             in["samples"].get<int64_t>());
  return fmt::format("{}: {} parameters; {}\n", in["model"].get<std::string>(), HumanCount(in["params"].get<double>()),
                     what) +
         t.Render() +
         (in.contains("planning_only") ? fmt::format("read for planning only: {}; `loom run` refuses it\n",
                                                     in["planning_only"].get<std::string>())
                                       : "");
}

}  // namespace loom
