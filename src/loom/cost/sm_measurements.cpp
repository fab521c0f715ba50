#include "loom/cost/sm_measurements.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <type_traits>

#include "loom/cost/layer_work.h"
#include "loom/error.h"
#include "loom/path_kind.h"

namespace loom {

namespace {

constexpr const char* kFiles =
    "sm_surface_small.json, sm_scaling_large.json, colocation_small.json, colocation_large.json";

// A measurements file: a non-empty list of rows (an empty one would leave its
// half of the fit to the others in silence).
nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(fmt::format("{}: cannot open (a measurements folder holds {})", path, kFiles));
  nlohmann::json rows;
  try {
    rows = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{}: not JSON: {}", path, e.what()));
  }
  if (!rows.is_array() || rows.empty()) {
    throw Error(fmt::format("{}: {}; expected a non-empty list of measured rows (measure.py writes them)", path,
                            rows.is_array() ? "no rows" : "not a list"));
  }
  return rows;
}

template <typename T>
T Field(const nlohmann::json& row, const char* key, const std::string& path, size_t index) {
  if (!row.contains(key)) throw Error(fmt::format("{}: row {} has no field '{}'", path, index, key));
  try {
    return row[key].get<T>();
  } catch (const nlohmann::json::exception&) {
    throw Error(fmt::format("{}: row {}: field '{}' is {}; valid: a {}", path, index, key, row[key].dump(),
                            std::is_same_v<T, std::string> ? "string" : "number"));
  }
}

// A time or a size: finite and > 0 (a negative alone time turned the
// interference fit's coefficients around in silence).
double PositiveField(const nlohmann::json& row, const char* key, const std::string& path, size_t index) {
  const double v = Field<double>(row, key, path, index);
  if (!(v > 0) || !std::isfinite(v)) {
    throw Error(
        fmt::format("{}: row {}: field '{}' is {}; valid: a finite number > 0", path, index, key, row[key].dump()));
  }
  return v;
}

// An SM count: a whole number the GPU has (a green context takes whole SMs).
int SmsField(const nlohmann::json& row, const char* key, const std::string& path, size_t index, const GpuSpec& gpu) {
  if (!row.contains(key)) throw Error(fmt::format("{}: row {} has no field '{}'", path, index, key));
  const nlohmann::json& v = row[key];
  if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > gpu.sm_count) {
    throw Error(
        fmt::format("{}: row {}: field '{}' is {}; valid: a whole number of SMs from 1 to {} (the {}'s; "
                    "--gpu names the GPU they were measured on)",
                    path, index, key, v.dump(), gpu.sm_count, gpu.name));
  }
  return static_cast<int>(v.get<int64_t>());
}

// A positive whole number (a width, a count of layers, a batch).
int64_t CountField(const nlohmann::json& row, const char* key, const std::string& path, size_t index) {
  if (!row.contains(key)) throw Error(fmt::format("{}: row {} has no field '{}'", path, index, key));
  const nlohmann::json& v = row[key];
  if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > (int64_t{1} << 30)) {
    throw Error(fmt::format("{}: row {}: field '{}' is {}; valid: a whole number from 1 to {}", path, index, key,
                            v.dump(), int64_t{1} << 30));
  }
  return v.get<int64_t>();
}

struct Shape {
  Layer layer;
  int layers = 1;
  int64_t batch = 1, seq = 1;
};

// Bytes one forward + backward of the stack moves (bf16).
double StackBytes(const Shape& s) {
  TokenStats t;
  t.sequences = static_cast<double>(s.batch);
  t.tokens = static_cast<double>(s.batch * s.seq);
  t.sum_sq = static_cast<double>(s.batch) * static_cast<double>(s.seq) * static_cast<double>(s.seq);
  const LayerWork w = EstimateLayerWork(s.layer, t, 1);
  return s.layers * (w.Bytes(Phase::kForward) + w.Bytes(Phase::kBackwardData) + w.Bytes(Phase::kBackwardWeight));
}

Layer Transformer(int64_t hidden, int64_t ffn, int64_t heads, int64_t kv_heads, bool gated, bool causal) {
  Layer l;
  l.kind = LayerKind::kTransformer;
  l.hidden = hidden;
  l.ffn_hidden = ffn;
  l.heads = heads;
  l.kv_heads = kv_heads;
  l.gated_mlp = gated;
  l.causal = causal;
  return l;
}

// The two large layers of sm_scaling_large.json / colocation_large.json, as
// measure.py builds them (Layer(1280, 5120, 16, 16, ...), Layer(2048, 8192, 32, 8, gated, causal)).
bool LargeShape(const std::string& name, Shape* s) {
  int b = 0, seq = 0;
  if (name.rfind("vit-huge layer", 0) == 0 &&
      std::sscanf(name.c_str(), "vit-huge layer fwd+bwd B%d S%d", &b, &seq) == 2) {
    s->layer = Transformer(1280, 5120, 16, 16, false, false);
  } else if (name.rfind("llama3-1b layer", 0) == 0 &&
             std::sscanf(name.c_str(), "llama3-1b layer fwd+bwd B%d S%d", &b, &seq) == 2) {
    s->layer = Transformer(2048, 8192, 32, 8, true, true);
  } else {
    return false;
  }
  s->layers = 1;
  s->batch = b;
  s->seq = seq;
  return true;
}

}  // namespace

void SmMeasurements::SetHostSlowdowns(double launch_floor_s_per_layer) {
  for (size_t i = 0; i < interference.size(); ++i) {
    interference[i].host_slowdown =
        launch_floor_s_per_layer > 0 ? launch_floor_s_per_layer * launched_layers_per_s[i] - 1 : -1;
  }
}

SmMeasurements LoadSmMeasurements(const std::string& dir, const GpuSpec& gpu) {
  if (dir.empty()) throw Error(fmt::format("measurements: empty; valid: a folder holding {}", kFiles));
  if (const PathKind kind = KindOfPath(dir); kind != PathKind::kDirectory) {
    throw Error(fmt::format("{}: {}; valid: a folder holding {}", dir,
                            kind == PathKind::kNone ? "no such folder" : "not a folder", kFiles));
  }
  SmMeasurements out;
  // Small stacks: shape fields per row; the colocation file names them by the
  // same module string plus " B<batch>".
  std::map<std::string, Shape> small;
  const std::string surface_path = dir + "/sm_surface_small.json";
  const auto surface = ReadJson(surface_path);
  for (size_t i = 0; i < surface.size(); ++i) {
    const auto& r = surface[i];
    Shape s;
    const auto name = Field<std::string>(r, "module", surface_path, i);
    const auto hidden = CountField(r, "hidden", surface_path, i);
    const auto heads = CountField(r, "heads", surface_path, i);
    // "gated causal" in the name: Qwen3-VL's SwiGLU layers with causal attention.
    const bool gated = name.find("gated") != std::string::npos, causal = name.find("causal") != std::string::npos;
    s.layer = Transformer(hidden, CountField(r, "ffn_hidden", surface_path, i), heads, heads, gated, causal);
    s.layers = static_cast<int>(CountField(r, "layers", surface_path, i));
    s.seq = CountField(r, "seq", surface_path, i);
    s.batch = CountField(r, "batch", surface_path, i);
    const std::string key = fmt::format("{} B{}", name, s.batch);
    small[key] = s;
    out.scaling.push_back(
        {key, s.layers, SmsField(r, "sms", surface_path, i, gpu), PositiveField(r, "fwd_bwd_s", surface_path, i)});
  }
  const std::string large_path = dir + "/sm_scaling_large.json";
  const auto large = ReadJson(large_path);
  for (size_t i = 0; i < large.size(); ++i) {
    const auto name = Field<std::string>(large[i], "workload", large_path, i);
    Shape s;
    if (!LargeShape(name, &s)) continue;  // the GEMM and the copy are kernels, not modules
    out.scaling.push_back(
        {name, 1, SmsField(large[i], "sms", large_path, i, gpu), PositiveField(large[i], "time_s", large_path, i)});
  }
  auto bandwidth = [&](const Shape& s, double reps, double alone_s) {
    return reps * StackBytes(s) / (alone_s * gpu.hbm_bytes_per_s);
  };
  for (const char* file : {"colocation_small.json", "colocation_large.json"}) {
    const std::string path = dir + "/" + file;
    const auto rows = ReadJson(path);
    for (size_t i = 0; i < rows.size(); ++i) {
      const auto& r = rows[i];
      Shape sa, sb;
      const auto a = Field<std::string>(r, "a", path, i), b = Field<std::string>(r, "b", path, i);
      auto shape = [&](const std::string& name, Shape* s) {
        if (LargeShape(name, s)) return;
        auto it = small.find(name);
        if (it == small.end())
          throw Error(fmt::format("{}: row {}: module '{}' is not in sm_surface_small.json", path, i, name));
        *s = it->second;
      };
      shape(a, &sa);
      shape(b, &sb);
      const double reps_a = r.contains("reps_a") ? PositiveField(r, "reps_a", path, i) : 1.0;
      const double reps_b = r.contains("reps_b") ? PositiveField(r, "reps_b", path, i) : 1.0;
      const double alone_a = PositiveField(r, "alone_a_s", path, i), alone_b = PositiveField(r, "alone_b_s", path, i);
      const double ba = bandwidth(sa, reps_a, alone_a), bb = bandwidth(sb, reps_b, alone_b);
      const int sms_a = SmsField(r, "sms_a", path, i, gpu), sms_b = SmsField(r, "sms_b", path, i, gpu);
      // One host thread launched both (measure.py alternates their launches).
      const double launched = reps_a * sa.layers + reps_b * sb.layers;
      out.interference.push_back({fmt::format("{} on {} SMs beside {} on {}", a, sms_a, b, sms_b),
                                  {ba, bb},
                                  PositiveField(r, "together_a_s", path, i) / alone_a - 1});
      out.launched_layers_per_s.push_back(launched / alone_a);
      out.interference.push_back({fmt::format("{} on {} SMs beside {} on {}", b, sms_b, a, sms_a),
                                  {bb, ba},
                                  PositiveField(r, "together_b_s", path, i) / alone_b - 1});
      out.launched_layers_per_s.push_back(launched / alone_b);
    }
  }
  return out;
}

SmSharingReport FitSmSharing(const std::string& dir, const GpuSpec& gpu) {
  SmSharingReport rep;
  SmMeasurements m = LoadSmMeasurements(dir, gpu);
  rep.scaling = FitSmScaling(m.scaling, gpu.sm_count);
  // The floor fitted on the surfaces is the host's share of each co-location.
  m.SetHostSlowdowns(rep.scaling.law.launch_floor_s_per_layer);
  rep.interference = FitInterference(m.interference);
  rep.law = rep.scaling.law;
  // Eq. 8's terms only where they explain more than the host floor alone
  // (docs/cost-model.md: on the H100's runs they do not, so the profile has none).
  const auto& f = rep.interference;
  const SmSharing& best = f.r2_host_full >= f.r2_host_additive ? f.host_full : f.host_additive;
  if (std::max(f.r2_host_full, f.r2_host_additive) > f.r2_host_only) {
    rep.law.e1 = best.e1;
    rep.law.e2 = best.e2;
    rep.law.e3 = best.e3;
  }
  std::string& t = rep.text;
  t += fmt::format("SM scaling: time = max({:.3f} ms x layers, compute x ({:.3f} + {:.3f} / SM fraction))\n",
                   rep.law.launch_floor_s_per_layer * 1e3, rep.law.serial_fraction, 1 - rep.law.serial_fraction);
  t +=
      fmt::format("{:<62} {:>6} {:>11} {:>9} {:>9}\n", "module (batch)", "points", "compute ms", "mean err", "max err");
  for (const auto& mod : rep.scaling.modules) {
    t += fmt::format("{:<62} {:>6} {:>11.2f} {:>8.1f}% {:>8.1f}%\n", mod.module.substr(0, 62), mod.points,
                     mod.compute_s * 1e3, mod.mean_abs_error * 100, mod.max_abs_error * 100);
  }
  t += fmt::format("all points: mean error {:.1f}%\n\n", rep.scaling.mean_abs_error * 100);
  t += fmt::format("Interference (Eq. 8, relative slowdown) over {} co-located module runs:\n", m.interference.size());
  t += fmt::format("  none:          R^2 {:.3f}\n", f.r2_none);
  t += fmt::format("  additive:      R^2 {:.3f}  e1 {:.4f} e2 {:.4f}\n", f.r2_additive, f.additive.e1, f.additive.e2);
  t += fmt::format("  full (Eq. 8):  R^2 {:.3f}  e1 {:.4f} e2 {:.4f} e3 {:.4f}\n", f.r2_full, f.full.e1, f.full.e2,
                   f.full.e3);
  t += fmt::format("With the shared host's launch floor (one thread launches both; {} of {} runs sit on it):\n",
                   f.host_bound_points, m.interference.size());
  t += fmt::format("  host only:     R^2 {:.3f}\n", f.r2_host_only);
  t += fmt::format("  host+additive: R^2 {:.3f}  e1 {:.4f} e2 {:.4f}\n", f.r2_host_additive, f.host_additive.e1,
                   f.host_additive.e2);
  t += fmt::format("  host+full:     R^2 {:.3f}  e1 {:.4f} e2 {:.4f} e3 {:.4f}\n\n", f.r2_host_full, f.host_full.e1,
                   f.host_full.e2, f.host_full.e3);
  t += "# the profile's block (docs/cost-model.md, \"SM sharing\")\n";
  t += fmt::format(
      "sm_sharing: {{serial_fraction: {:.4f}, launch_floor_s_per_layer: {:.6g}, e1: {:.6g}, e2: {:.6g}, e3: {:.6g}}}\n",
      rep.law.serial_fraction, rep.law.launch_floor_s_per_layer, rep.law.e1, rep.law.e2, rep.law.e3);
  return rep;
}

}  // namespace loom
