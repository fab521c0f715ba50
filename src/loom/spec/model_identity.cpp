#include "loom/spec/model_identity.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>
#include <string_view>
#include <utility>

namespace loom {

namespace {

// "name value" pairs joined by ", "; a value never holds ", " (lists are
// joined by '+'), so FirstIdentityDifference splits them back.
class Fields {
 public:
  template <typename T>
  Fields& Add(std::string_view name, const T& value) {
    text_ += fmt::format("{}{} {}", text_.empty() ? "" : ", ", name, value);
    return *this;
  }
  Fields& Add(std::string_view name, bool value) { return Add(name, std::string_view(value ? "true" : "false")); }
  const std::string& text() const { return text_; }

 private:
  std::string text_;
};

std::string_view RopeScalingName(RopeScaling s) { return s == RopeScaling::kLlama3 ? "llama3" : "none"; }

// Every field of a layer: which of them its kind reads is the runtime's
// business, and a field it does not read keeps its default on both sides.
std::string LayerFields(const Layer& l) {
  Fields f;
  f.Add("kind", LayerKindName(l.kind))
      .Add("hidden", l.hidden)
      .Add("ffn_hidden", l.ffn_hidden)
      .Add("heads", l.heads)
      .Add("kv_heads", l.kv_heads)
      .Add("head_dim", l.head_dim)
      .Add("gated_mlp", l.gated_mlp)
      .Add("causal", l.causal)
      .Add("cross_attention", l.cross_attention)
      .Add("self_attention", l.self_attention)
      .Add("context_dim", l.context_dim)
      .Add("conv_kernel", l.conv_kernel)
      .Add("norm", NormKindName(l.norm))
      .Add("final_norm", NormKindName(l.final_norm))
      .Add("norm_eps", l.norm_eps)
      .Add("qkv_bias", l.qkv_bias)
      .Add("out_bias", l.out_bias)
      .Add("mlp_bias", l.mlp_bias)
      .Add("qk_norm", l.qk_norm)
      .Add("activation", ActivationName(l.activation))
      .Add("rope.theta", l.rope.theta)
      .Add("rope.max_positions", l.rope.max_positions)
      .Add("rope.scaling", RopeScalingName(l.rope.scaling))
      .Add("rope.factor", l.rope.factor)
      .Add("rope.low_freq_factor", l.rope.low_freq_factor)
      .Add("rope.high_freq_factor", l.rope.high_freq_factor)
      .Add("rope.original_max_positions", l.rope.original_max_positions)
      .Add("vocab", l.vocab)
      .Add("positions", l.positions)
      .Add("tied", l.tied)
      .Add("in_channels", l.in_channels)
      .Add("out_channels", l.out_channels)
      .Add("kernel", l.kernel)
      .Add("dims", l.dims)
      .Add("temporal_patch", l.temporal_patch)
      .Add("stride", l.stride)
      .Add("bias", l.bias)
      .Add("spatial_divisor", l.spatial_divisor)
      .Add("time_embed_dim", l.time_embed_dim)
      .Add("in_dim", l.in_dim)
      .Add("out_dim", l.out_dim)
      .Add("frozen", l.frozen);
  return f.text();
}

std::string ModuleFields(const Model& model, const Module& m) {
  std::vector<std::string> inputs;
  for (int i : m.inputs) inputs.push_back(model.modules[i].name);
  std::vector<std::string> pins;
  for (const auto& [h, w] : m.tokens.grid_pinpoints) pins.push_back(fmt::format("{}x{}", h, w));
  const TokenRule& t = m.tokens;
  Fields f;
  f.Add("role", ModuleRoleName(m.role))
      .Add("modality", ModalityName(m.modality))
      .Add("frozen", m.frozen)
      .Add("bitfield_attention", m.bitfield_attention)
      .Add("inputs", inputs.empty() ? std::string("none") : fmt::format("{}", fmt::join(inputs, "+")))
      .Add("weights_prefix", m.weights_prefix.empty() ? std::string("none") : m.weights_prefix)
      .Add("tokens.source", TokenSourceName(t.source))
      .Add("tokens.tokens_per_image", t.tokens_per_image)
      .Add("tokens.out_tokens_per_image", t.out_tokens_per_image)
      .Add("tokens.resize_px", t.resize_px)
      .Add("tokens.patch_px", t.patch_px)
      .Add("tokens.merge", t.merge)
      .Add("tokens.extra_tokens", t.extra_tokens)
      .Add("tokens.drop_tokens", t.drop_tokens)
      .Add("tokens.concat_layers", t.concat_layers)
      .Add("tokens.frames_per_token", t.frames_per_token)
      .Add("tokens.tokens_per_s", t.tokens_per_s)
      .Add("tokens.downsample", t.downsample)
      .Add("tokens.tiling", ImageTilingName(t.tiling))
      .Add("tokens.tile_px", t.tile_px)
      .Add("tokens.max_tiles", t.max_tiles)
      .Add("tokens.longest_px", t.longest_px)
      .Add("tokens.grid_pinpoints", pins.empty() ? std::string("none") : fmt::format("{}", fmt::join(pins, "+")))
      .Add("tokens.anyres_max", t.anyres_max)
      .Add("tokens.max_tokens", t.max_tokens);
  return f.text();
}

// "module llm layers 1-16: kind transformer, ..." split at its first ": ".
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

}  // namespace

std::vector<std::string> ModelIdentity(const Model& model) {
  std::vector<std::string> lines;
  lines.push_back(fmt::format("model: image_token_id {}",
                              model.image_token_id < 0 ? "none" : std::to_string(model.image_token_id)));
  for (const Module& m : model.modules) {
    lines.push_back(fmt::format("module {}: {}", m.name, ModuleFields(model, m)));
    // Layers are numbered from 1 in these lines, as people count them.
    for (size_t first = 0; first < m.layers.size();) {
      size_t last = first;
      while (last + 1 < m.layers.size() && m.layers[last + 1] == m.layers[first]) ++last;
      const std::string which =
          first == last ? fmt::format("layer {}", first + 1) : fmt::format("layers {}-{}", first + 1, last + 1);
      lines.push_back(fmt::format("module {} {}: {}", m.name, which, LayerFields(m.layers[first])));
      first = last + 1;
    }
  }
  return lines;
}

std::string FirstIdentityDifference(const std::vector<std::string>& was, const std::vector<std::string>& now) {
  for (size_t i = 0; i < was.size() || i < now.size(); ++i) {
    if (i >= was.size()) return fmt::format("'{}' here has nothing there", HeaderAndFields(now[i]).first);
    if (i >= now.size()) return fmt::format("'{}' there has nothing here", HeaderAndFields(was[i]).first);
    if (was[i] == now[i]) continue;
    const auto [was_header, was_fields] = HeaderAndFields(was[i]);
    const auto [now_header, now_fields] = HeaderAndFields(now[i]);
    if (was_header != now_header) return fmt::format("'{}' there, '{}' here", was_header, now_header);
    std::map<std::string, std::string> mine;
    for (const auto& [name, value] : SplitFields(now_fields)) mine[name] = value;
    std::vector<std::string> differences;
    for (const auto& [name, value] : SplitFields(was_fields)) {
      const auto it = mine.find(name);
      const std::string here = it == mine.end() ? "not given" : it->second;
      if (here != value) differences.push_back(fmt::format("{} is {} there, {} here", name, value, here));
    }
    if (differences.empty()) return fmt::format("{}: '{}' there, '{}' here", was_header, was_fields, now_fields);
    return fmt::format("{}: {}", was_header, fmt::join(differences, "; "));
  }
  return "";
}

}  // namespace loom
