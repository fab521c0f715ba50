#include "loom/cost/profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "loom/cost/layer_work.h"
#include "loom/error.h"
#include "loom/spec/yaml_reader.h"

namespace loom {

namespace {

double Median(std::vector<double> v) {
  if (v.empty()) return 1.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

ProfileShape ShapeOf(const Layer& l) { return {l.hidden, l.ffn_hidden, l.heads, l.kv_heads, l.gated_mlp, l.causal}; }

Layer LayerOf(const ProfileShape& s) {
  Layer l;
  l.kind = LayerKind::kTransformer;
  l.hidden = s.hidden;
  l.ffn_hidden = s.ffn_hidden;
  l.heads = s.heads;
  l.kv_heads = s.kv_heads;
  l.gated_mlp = s.gated;
  l.causal = s.causal;
  return l;
}

TokenStats TokensOf(int64_t batch, int64_t seq) {
  TokenStats t;
  t.tokens = static_cast<double>(batch * seq);
  t.sum_sq = static_cast<double>(batch) * static_cast<double>(seq) * static_cast<double>(seq);
  t.sequences = static_cast<double>(batch);
  return t;
}

Profile ParseProfile(const std::string& yaml_text, const std::string& file) {
  YamlMap doc(ParseYaml(yaml_text, file), file, "");
  Profile p;
  p.file = file;
  p.gpu = doc.String("gpu");
  try {
    FindGpu(p.gpu);
  } catch (const Error& e) {
    throw doc.ErrorAt("gpu", e.what());
  }
  p.applies_to = {p.gpu};
  if (auto node = doc.OptionalChild("applies_to")) {
    if (!node->IsSequence()) throw doc.ErrorAt("applies_to", "expected a list of built-in GPU names");
    p.applies_to.clear();
    for (size_t i = 0; i < node->size(); ++i) {
      const std::string name = ScalarText((*node)[i], file, fmt::format("applies_to[{}]", i));
      try {
        FindGpu(name);
      } catch (const Error& e) {
        throw Error(fmt::format("{}: applies_to[{}]: {}", Where((*node)[i], file), i, e.what()));
      }
      p.applies_to.push_back(name);
    }
  }
  p.source = doc.String("source", "");
  const std::string precision = doc.Enum("precision", {"bf16", "fp16", "tf32", "fp32"}, "bf16");
  for (Precision q : {Precision::kBf16, Precision::kFp16, Precision::kTf32, Precision::kFp32}) {
    if (PrecisionName(q) == precision) p.precision = q;
  }
  p.ops = ParseCalibrationPoints(doc.Child("ops"), file, "ops", AtPrecision(FindGpu(p.gpu), p.precision));
  if (auto node = doc.OptionalChild("collective")) {
    YamlMap c(*node, file, "collective");
    p.collective.bytes_per_s = c.PositiveReal("bytes_per_s");
    p.collective.latency_s = c.NonNegativeReal("latency_s", 0);
    c.RejectUnknownKeys();
  }
  if (auto node = doc.OptionalChild("sm_sharing")) {
    YamlMap s(*node, file, "sm_sharing");
    p.sm_sharing.serial_fraction = s.NonNegativeReal("serial_fraction", 0);
    if (p.sm_sharing.serial_fraction >= 1) {
      throw s.ErrorAt("serial_fraction", fmt::format("is {}; it must be in [0, 1)", p.sm_sharing.serial_fraction));
    }
    p.sm_sharing.launch_floor_s_per_layer = s.NonNegativeReal("launch_floor_s_per_layer", 0);
    p.sm_sharing.e1 = s.Real("e1", 0);
    p.sm_sharing.e2 = s.Real("e2", 0);
    p.sm_sharing.e3 = s.Real("e3", 0);
    s.RejectUnknownKeys();
  }
  if (auto node = doc.OptionalChild("link")) {
    YamlMap link(*node, file, "link");
    p.link.bytes_per_s = link.PositiveReal("bytes_per_s");
    p.link.latency_s = link.NonNegativeReal("latency_s", 0);
    link.RejectUnknownKeys();
  }
  YAML::Node layers = doc.Child("layers");
  if (!layers.IsSequence()) throw doc.ErrorAt("layers", "expected a list of measured transformer layers");
  doc.RejectUnknownKeys();
  for (size_t i = 0; i < layers.size(); ++i) {
    YamlMap m(layers[i], file, fmt::format("layers[{}]", i));
    ProfileLayerPoint pt;
    pt.label = m.String("label", "");
    pt.shape.hidden = m.PositiveInt("hidden");
    pt.shape.ffn_hidden = m.PositiveInt("ffn_hidden");
    pt.shape.heads = m.PositiveInt("heads");
    pt.shape.kv_heads = m.PositiveInt("kv_heads");
    pt.shape.gated = m.Bool("gated", false);
    pt.shape.causal = m.Bool("causal", false);
    pt.tp = static_cast<int>(m.PositiveInt("tp", 1));
    pt.frozen = m.Bool("frozen", false);
    pt.batch = m.PositiveInt("batch");
    pt.seq = m.PositiveInt("seq");
    pt.forward_s = m.PositiveReal("fwd_s");
    pt.backward_s = m.PositiveReal("bwd_s");
    if (pt.shape.kv_heads > pt.shape.heads || pt.shape.heads % pt.shape.kv_heads != 0) {
      throw m.ErrorAt("kv_heads", fmt::format("{} key-value heads do not group {} query heads; valid: a divisor of {}",
                                              pt.shape.kv_heads, pt.shape.heads, pt.shape.heads));
    }
    if (pt.shape.heads % pt.tp != 0 || (pt.shape.kv_heads % pt.tp != 0 && pt.tp % pt.shape.kv_heads != 0)) {
      throw m.ErrorAt(
          "tp", fmt::format("{} does not split {} heads / {} kv heads", pt.tp, pt.shape.heads, pt.shape.kv_heads));
    }
    m.RejectUnknownKeys();
    // The correction keeps one anchor per measured point; a second row of the
    // same point would be dropped without a word.
    for (size_t k = 0; k < p.layers.size(); ++k) {
      const ProfileLayerPoint& q = p.layers[k];
      if (q.shape == pt.shape && q.tp == pt.tp && q.frozen == pt.frozen && q.batch == pt.batch && q.seq == pt.seq) {
        throw m.ErrorAt("seq", fmt::format("measures the same layer, TP shard, frozen status, batch and seq as "
                                           "layers[{}]; keep one row (the mean of both, if both are measurements)",
                                           k));
      }
    }
    p.layers.push_back(std::move(pt));
  }
  return p;
}

Profile LoadProfile(const std::string& path) {
  const std::string text = ReadTextFile(path, "profile YAML");
  // A calibration file (docs/spec-format.md) is a profile of kernels alone:
  // its points are the ops, measured in bf16 (the datasheet peak it is fitted
  // against), and no layer corrects the fitted roofline.
  const YAML::Node doc = ParseYaml(text, path);
  if (doc.IsMap() && doc["points"] && !doc["ops"]) {
    const Calibration cal = ParseCalibration(text, path);
    Profile p;
    p.file = path;
    p.gpu = cal.gpu;
    p.applies_to = {cal.gpu};
    p.source = cal.measured_with;
    p.precision = Precision::kBf16;
    p.ops = cal.points;
    return p;
  }
  return ParseProfile(text, path);
}

std::string ProfileToYaml(const Profile& p) {
  std::string out = fmt::format("gpu: {}\napplies_to: [", p.gpu);
  for (size_t i = 0; i < p.applies_to.size(); ++i) out += (i ? ", " : "") + p.applies_to[i];
  out += fmt::format("]\nsource: \"{}\"\nprecision: {}\nops:\n", p.source, PrecisionName(p.precision));
  static const char* kOps[] = {"gemm", "attention", "elementwise", "conv"};
  for (const auto& o : p.ops) {
    out += fmt::format("  - {{op: {}, flops: {:.17g}, bytes: {:.17g}, time_s: {:.9g}}}\n", kOps[static_cast<int>(o.op)],
                       o.flops, o.bytes, o.time_s);
  }
  if (p.collective.bytes_per_s > 0) {
    out += fmt::format("collective: {{bytes_per_s: {:.9g}, latency_s: {:.9g}}}\n", p.collective.bytes_per_s,
                       p.collective.latency_s);
  }
  const SmSharing& s = p.sm_sharing;
  if (!(s == SmSharing{})) {
    out += fmt::format(
        "sm_sharing: {{serial_fraction: {:.9g}, launch_floor_s_per_layer: {:.9g}, e1: {:.9g}, e2: {:.9g}, "
        "e3: {:.9g}}}\n",
        s.serial_fraction, s.launch_floor_s_per_layer, s.e1, s.e2, s.e3);
  }
  if (p.link.bytes_per_s > 0) {
    out += fmt::format("link: {{bytes_per_s: {:.9g}, latency_s: {:.9g}}}\n", p.link.bytes_per_s, p.link.latency_s);
  }
  out += "layers:\n";
  for (const auto& l : p.layers) {
    out += fmt::format(
        "  - {{label: {}, hidden: {}, ffn_hidden: {}, heads: {}, kv_heads: {}, gated: {}, causal: {}, tp: {}, "
        "frozen: {}, batch: {}, seq: {}, fwd_s: {:.9g}, bwd_s: {:.9g}}}\n",
        l.label, l.shape.hidden, l.shape.ffn_hidden, l.shape.heads, l.shape.kv_heads, l.shape.gated, l.shape.causal,
        l.tp, l.frozen, l.batch, l.seq, l.forward_s, l.backward_s);
  }
  return out;
}

ProfiledCostModel::ProfiledCostModel(Profile profile)
    : profile_(std::move(profile)),
      roofline_(FitEfficiency(profile_.ops, AtPrecision(FindGpu(profile_.gpu), profile_.precision)),
                "fitted roofline") {
  const GpuSpec& gpu = FindGpu(profile_.gpu);
  std::vector<double> forward, backward;
  for (const auto& pt : profile_.layers) {
    const Layer l = LayerOf(pt.shape);
    Layer as_run = l;
    as_run.frozen = pt.frozen;
    const TokenStats t = TokensOf(pt.batch, pt.seq);
    const ComputeTimes r =
        roofline_.LayerCompute(as_run, t, pt.tp, EstimateLayerWork(as_run, t, pt.tp, ElementBytes(profile_.precision)),
                               gpu, profile_.precision);
    Anchor a;
    a.log_tokens = std::log(t.tokens);
    a.log_seq = std::log(static_cast<double>(pt.seq));
    a.forward = pt.forward_s / r.forward_s;
    // A frozen layer's backward is backward-data only (no weight gradients).
    a.backward = pt.backward_s / (r.backward_data_s + (pt.frozen ? 0.0 : r.backward_weight_s));
    anchors_[{pt.shape, pt.tp, pt.frozen}].push_back(a);
    if (!pt.frozen) {
      forward.push_back(a.forward);
      backward.push_back(a.backward);
    }
  }
  for (auto& [key, v] : anchors_) {
    std::sort(v.begin(), v.end(), [](const Anchor& a, const Anchor& b) {
      return std::tie(a.log_tokens, a.log_seq) < std::tie(b.log_tokens, b.log_seq);
    });
  }
  median_forward_ = Median(forward);
  median_backward_ = Median(backward);
}

std::string CostModelNameFor(const CostModel& model, Precision precision) {
  const auto* profiled = dynamic_cast<const ProfiledCostModel*>(&model);
  if (profiled == nullptr) return model.name();
  const Precision measured = profiled->profile().precision;
  if (measured == precision || (IsMixedPrecision(measured) && IsMixedPrecision(precision))) return model.name();
  return fmt::format(
      "{}; measured in {}, so this {} work is priced by its fitted roofline, not its layers: give "
      "--precision {} to compare with it, or profile in {} (loom profile --precision {})",
      model.name(), PrecisionName(measured), PrecisionName(precision), PrecisionName(measured),
      PrecisionName(precision), PrecisionName(precision));
}

std::string ProfiledCostModel::name() const { return fmt::format("profile {} ({})", profile_.gpu, profile_.file); }

std::pair<double, double> ProfiledCostModel::Correction(const ProfileShape& shape, int tp, bool frozen,
                                                        const TokenStats& tokens) const {
  // The measured series closest to the query: the same shape at the same TP
  // shard and frozen status, else the same shape at the nearest TP shard
  // (frozen status first), else the profile-wide median.
  const std::vector<Anchor>* series = nullptr;
  int best_cost = 1 << 30;
  for (const auto& [key, v] : anchors_) {
    const auto& [s, t, f] = key;
    if (!(s == shape)) continue;
    const int cost = std::abs(static_cast<int>(std::log2(t)) - static_cast<int>(std::log2(tp))) * 2 + (f != frozen);
    if (cost < best_cost) {
      best_cost = cost;
      series = &v;
    }
  }
  if (series == nullptr || tokens.tokens <= 0) return {median_forward_, median_backward_};
  const double x = std::log(tokens.tokens);
  // The causal sequence length doing the same attention work (profiled
  // backbone layers are causal; a bitfield mask's pairs count as 2 x pairs).
  const double seq = tokens.mask_pairs > 0  ? 2 * tokens.mask_pairs / tokens.tokens
                     : tokens.sequences > 0 ? tokens.sum_sq / tokens.tokens
                                            : tokens.tokens;
  const double log_seq = std::log(std::max(seq, 1.0));
  // Of the anchors at each measured token count, the one whose sequence length
  // is closest to the query's (the same tokens in longer sequences do more attention).
  std::vector<const Anchor*> row;
  for (size_t i = 0; i < series->size();) {
    size_t j = i;
    const Anchor* pick = &(*series)[i];
    while (j < series->size() && (*series)[j].log_tokens == (*series)[i].log_tokens) {
      if (std::abs((*series)[j].log_seq - log_seq) < std::abs(pick->log_seq - log_seq)) pick = &(*series)[j];
      ++j;
    }
    row.push_back(pick);
    i = j;
  }
  if (x <= row.front()->log_tokens) return {row.front()->forward, row.front()->backward};
  if (x >= row.back()->log_tokens) return {row.back()->forward, row.back()->backward};
  size_t k = 1;
  while (row[k]->log_tokens < x) ++k;
  const Anchor& a = *row[k - 1];
  const Anchor& b = *row[k];
  const double w = (x - a.log_tokens) / (b.log_tokens - a.log_tokens);
  return {a.forward + w * (b.forward - a.forward), a.backward + w * (b.backward - a.backward)};
}

ComputeTimes ProfiledCostModel::LayerCompute(const Layer& layer, const TokenStats& tokens, int tp,
                                             const LayerWork& work, const GpuSpec& gpu, Precision precision) const {
  ComputeTimes t = roofline_.LayerCompute(layer, tokens, tp, work, gpu, precision);
  const bool measured_precision =
      precision == profile_.precision || (IsMixedPrecision(precision) && IsMixedPrecision(profile_.precision));
  if (layer.kind != LayerKind::kTransformer || layer.cross_attention || !measured_precision) return t;
  const auto [forward, backward] = Correction(ShapeOf(layer), tp, layer.frozen, tokens);
  t.forward_s *= forward;
  t.forward_elementwise_s *= forward;
  t.backward_data_s *= backward;
  t.backward_weight_s *= backward;
  return t;
}

}  // namespace loom
