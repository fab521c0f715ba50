#include "loom/spec/model_identity.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>
#include <regex>
#include <string_view>
#include <utility>

namespace loom {

namespace {

// "name value" pairs joined by ", ", each only where it differs from the
// field's default (so that a field a later Loom adds, at a default that keeps
// today's behaviour, leaves today's checkpoints resumable). A value never
// holds ", " (lists are joined by '+'), so FirstIdentityDifference splits them back.
// With `all`, every field (what FieldDifferences says a default is).
class Fields {
 public:
  explicit Fields(bool all) : all_(all) {}
  template <typename T>
  Fields& Add(std::string_view name, const T& value, const T& default_value) {
    if (all_ || !(value == default_value)) Always(name, value);
    return *this;
  }
  template <typename T>
  Fields& Always(std::string_view name, const T& value) {  // fmt writes a bool as true or false
    text_ += fmt::format("{}{} {}", text_.empty() ? "" : ", ", name, value);
    return *this;
  }
  const std::string& text() const { return text_; }

 private:
  bool all_;
  std::string text_;
};

std::string_view RopeScalingName(RopeScaling s) { return s == RopeScaling::kLlama3 ? "llama3" : "none"; }

// Every field a layer computes with. Not rope.max_positions: a guard on the
// sequences a run may pack, not part of what it trained.
std::string LayerFields(const Layer& l, bool all) {
  const Layer d;
  Fields f(all);
  f.Always("kind", LayerKindName(l.kind))
      .Add("hidden", l.hidden, d.hidden)
      .Add("ffn_hidden", l.ffn_hidden, d.ffn_hidden)
      .Add("heads", l.heads, d.heads)
      .Add("kv_heads", l.kv_heads, d.kv_heads)
      .Add("head_dim", l.head_dim, d.head_dim)
      .Add("gated_mlp", l.gated_mlp, d.gated_mlp)
      .Add("causal", l.causal, d.causal)
      .Add("cross_attention", l.cross_attention, d.cross_attention)
      .Add("self_attention", l.self_attention, d.self_attention)
      .Add("context_dim", l.context_dim, d.context_dim)
      .Add("conv_kernel", l.conv_kernel, d.conv_kernel)
      .Add("norm", NormKindName(l.norm), NormKindName(d.norm))
      .Add("final_norm", NormKindName(l.final_norm), NormKindName(d.final_norm))
      .Add("norm_eps", l.norm_eps, d.norm_eps)
      .Add("qkv_bias", l.qkv_bias, d.qkv_bias)
      .Add("out_bias", l.out_bias, d.out_bias)
      .Add("mlp_bias", l.mlp_bias, d.mlp_bias)
      .Add("qk_norm", l.qk_norm, d.qk_norm)
      .Add("activation", ActivationName(l.activation), ActivationName(d.activation))
      .Add("rope.theta", l.rope.theta, d.rope.theta)
      .Add("rope.scaling", RopeScalingName(l.rope.scaling), RopeScalingName(d.rope.scaling))
      .Add("rope.factor", l.rope.factor, d.rope.factor)
      .Add("rope.low_freq_factor", l.rope.low_freq_factor, d.rope.low_freq_factor)
      .Add("rope.high_freq_factor", l.rope.high_freq_factor, d.rope.high_freq_factor)
      .Add("rope.original_max_positions", l.rope.original_max_positions, d.rope.original_max_positions)
      .Add("vocab", l.vocab, d.vocab)
      .Add("positions", l.positions, d.positions)
      .Add("tied", l.tied, d.tied)
      .Add("in_channels", l.in_channels, d.in_channels)
      .Add("out_channels", l.out_channels, d.out_channels)
      .Add("kernel", l.kernel, d.kernel)
      .Add("dims", l.dims, d.dims)
      .Add("temporal_patch", l.temporal_patch, d.temporal_patch)
      .Add("stride", l.stride, d.stride)
      .Add("bias", l.bias, d.bias)
      .Add("spatial_divisor", l.spatial_divisor, d.spatial_divisor)
      .Add("time_embed_dim", l.time_embed_dim, d.time_embed_dim)
      .Add("in_dim", l.in_dim, d.in_dim)
      .Add("out_dim", l.out_dim, d.out_dim)
      .Add("frozen", l.frozen, d.frozen);
  return f.text();
}

// A module's place in the graph, its token rule and its layer count. Not
// weights_prefix: where a Hugging Face checkpoint keeps its tensors, while a
// training checkpoint keeps them under Loom's stage names.
std::string ModuleFields(const Model& model, const Module& m, bool all) {
  std::vector<std::string> inputs;
  for (int i : m.inputs) inputs.push_back(model.modules[i].name);
  std::vector<std::string> pins;
  for (const auto& [h, w] : m.tokens.grid_pinpoints) pins.push_back(fmt::format("{}x{}", h, w));
  const TokenRule& t = m.tokens;
  const TokenRule d;
  Fields f(all);
  f.Always("role", ModuleRoleName(m.role))
      .Always("modality", ModalityName(m.modality))
      .Always("layers", m.layers.size())
      .Add("frozen", m.frozen, false)
      .Add("bitfield_attention", m.bitfield_attention, false)
      .Add("inputs", inputs.empty() ? std::string("none") : fmt::format("{}", fmt::join(inputs, "+")),
           std::string("none"))
      .Always("tokens.source", TokenSourceName(t.source))
      .Add("tokens.tokens_per_image", t.tokens_per_image, d.tokens_per_image)
      .Add("tokens.out_tokens_per_image", t.out_tokens_per_image, d.out_tokens_per_image)
      .Add("tokens.resize_px", t.resize_px, d.resize_px)
      .Add("tokens.patch_px", t.patch_px, d.patch_px)
      .Add("tokens.merge", t.merge, d.merge)
      .Add("tokens.extra_tokens", t.extra_tokens, d.extra_tokens)
      .Add("tokens.drop_tokens", t.drop_tokens, d.drop_tokens)
      .Add("tokens.concat_layers", t.concat_layers, d.concat_layers)
      .Add("tokens.frames_per_token", t.frames_per_token, d.frames_per_token)
      .Add("tokens.tokens_per_s", t.tokens_per_s, d.tokens_per_s)
      .Add("tokens.downsample", t.downsample, d.downsample)
      .Add("tokens.tiling", ImageTilingName(t.tiling), ImageTilingName(d.tiling))
      .Add("tokens.tile_px", t.tile_px, d.tile_px)
      .Add("tokens.max_tiles", t.max_tiles, d.max_tiles)
      .Add("tokens.longest_px", t.longest_px, d.longest_px)
      .Add("tokens.grid_pinpoints", pins.empty() ? std::string("none") : fmt::format("{}", fmt::join(pins, "+")),
           std::string("none"))
      .Add("tokens.anyres_max", t.anyres_max, d.anyres_max)
      .Add("tokens.max_tokens", t.max_tokens, d.max_tokens);
  return f.text();
}

std::string ModelFields(const Model& model, bool all) {
  const auto id = [](int64_t v) { return v < 0 ? std::string("none") : std::to_string(v); };
  return Fields(all).Add("image_token_id", id(model.image_token_id), id(-1)).text();
}

// "module llm layers 2-5: kind transformer, ..." split at its first ": ".
std::pair<std::string, std::string> HeaderAndFields(const std::string& line) {
  const size_t colon = line.find(": ");
  if (colon == std::string::npos) return {line, ""};
  return {line.substr(0, colon), line.substr(colon + 2)};
}

// "name value, name value" as (name, value) pairs, in order.
std::vector<std::pair<std::string, std::string>> SplitFields(const std::string& text) {
  std::vector<std::pair<std::string, std::string>> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find(", ", start);
    if (end == std::string::npos) end = text.size();
    const std::string field = text.substr(start, end - start);
    const size_t space = field.find(' ');
    out.emplace_back(field.substr(0, space), space == std::string::npos ? "" : field.substr(space + 1));
    start = end + 2;
  }
  return out;
}

// A run's line ("module llm layers 2-5: F") as one line per layer ("module
// llm layer 2: F", ...), so that a change to one layer of a run is said as
// that layer's fields, not as runs of other lengths. Other lines as they are.
std::vector<std::string> ExpandRuns(const std::vector<std::string>& lines) {
  static const std::regex run(R"(^(module .+) layers ([0-9]+)-([0-9]+)$)");
  std::vector<std::string> out;
  for (const std::string& line : lines) {
    const auto [header, fields] = HeaderAndFields(line);
    std::smatch m;
    const int64_t count = std::regex_match(header, m, run) ? std::stoll(m[3]) - std::stoll(m[2]) + 1 : 0;
    if (count <= 0 || count > kMaxModelLayers) {
      out.push_back(line);
      continue;
    }
    for (int64_t i = std::stoll(m[2]); i <= std::stoll(m[3]); ++i)
      out.push_back(fmt::format("{} layer {}: {}", m[1].str(), i, fields));
  }
  return out;
}

// Each field's default as the lines write it: a field a line leaves out has it.
const std::map<std::string, std::string>& DefaultValues() {
  static const std::map<std::string, std::string> defaults = [] {
    std::map<std::string, std::string> out;
    const Model model;
    for (const std::string& text :
         {ModelFields(model, true), ModuleFields(model, Module{}, true), LayerFields(Layer{}, true)}) {
      for (const auto& [name, value] : SplitFields(text)) out[name] = value;
    }
    return out;
  }();
  return defaults;
}

// Two lines of one header, field by field; a field one side does not give is
// its default there.
std::string FieldDifferences(const std::string& was_fields, const std::string& now_fields) {
  const auto was = SplitFields(was_fields), now = SplitFields(now_fields);
  std::vector<std::string> names;
  std::map<std::string, std::string> there, here;
  for (const auto& [name, value] : was) {
    names.push_back(name);
    there[name] = value;
  }
  for (const auto& [name, value] : now) {
    if (!there.count(name)) names.push_back(name);
    here[name] = value;
  }
  std::vector<std::string> differences;
  const auto value_or_default = [](const std::map<std::string, std::string>& side, const std::string& name) {
    if (const auto it = side.find(name); it != side.end()) return it->second;
    const auto d = DefaultValues().find(name);
    return d != DefaultValues().end() ? d->second : std::string("not given");
  };
  for (const std::string& name : names) {
    const std::string a = value_or_default(there, name), b = value_or_default(here, name);
    if (a != b) differences.push_back(fmt::format("{} is {} there, {} here", name, a, b));
  }
  return fmt::format("{}", fmt::join(differences, "; "));
}

}  // namespace

std::vector<std::string> ModelIdentity(const Model& model) {
  std::vector<std::string> lines;
  lines.push_back("model: " + ModelFields(model, false));
  for (const Module& m : model.modules) {
    lines.push_back(fmt::format("module {}: {}", m.name, ModuleFields(model, m, false)));
    // Layers are numbered from 1 in these lines, as people count them.
    for (size_t first = 0; first < m.layers.size();) {
      size_t last = first;
      while (last + 1 < m.layers.size() && m.layers[last + 1] == m.layers[first]) ++last;
      const std::string which =
          first == last ? fmt::format("layer {}", first + 1) : fmt::format("layers {}-{}", first + 1, last + 1);
      lines.push_back(fmt::format("module {} {}: {}", m.name, which, LayerFields(m.layers[first], false)));
      first = last + 1;
    }
  }
  return lines;
}

std::string FirstIdentityDifference(const std::vector<std::string>& was_lines,
                                    const std::vector<std::string>& now_lines) {
  const std::vector<std::string> was = ExpandRuns(was_lines), now = ExpandRuns(now_lines);
  for (size_t i = 0; i < was.size() || i < now.size(); ++i) {
    if (i >= was.size()) return fmt::format("'{}' here has nothing there", HeaderAndFields(now[i]).first);
    if (i >= now.size()) return fmt::format("'{}' there has nothing here", HeaderAndFields(was[i]).first);
    if (was[i] == now[i]) continue;
    const auto [was_header, was_fields] = HeaderAndFields(was[i]);
    const auto [now_header, now_fields] = HeaderAndFields(now[i]);
    if (was_header != now_header) return fmt::format("'{}' there, '{}' here", was_header, now_header);
    const std::string differences = FieldDifferences(was_fields, now_fields);
    if (!differences.empty()) return fmt::format("{}: {}", was_header, differences);
  }
  return "";
}

}  // namespace loom
