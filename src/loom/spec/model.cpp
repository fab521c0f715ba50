#include "loom/spec/model.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <map>
#include <set>

#include "loom/did_you_mean.h"
#include "loom/path_kind.h"
#include "loom/regular_file.h"
#include "loom/spec/hf_config.h"
#include "loom/spec/yaml_reader.h"
#include "loom/spec/zoo.h"

namespace loom {

namespace {

template <typename E>
E ParseEnum(YamlMap& m, const std::string& key, const std::vector<std::pair<std::string, E>>& table,
            std::optional<E> default_value) {
  std::vector<std::string> names;
  for (const auto& [n, e] : table) {
    names.push_back(n);
  }
  if (!m.Has(key) && default_value) {
    return *default_value;
  }
  std::string value = m.Enum(key, names);
  for (const auto& [n, e] : table) {
    if (n == value) {
      return e;
    }
  }
  return table.front().second;  // unreachable: Enum() threw
}

const std::vector<std::pair<std::string, LayerKind>> kLayerKinds = {
    {"transformer", LayerKind::kTransformer},
    {"conformer", LayerKind::kConformer},
    {"patch_embed", LayerKind::kPatchEmbed},
    {"conv", LayerKind::kConv},
    {"embedding", LayerKind::kEmbedding},
    {"lm_head", LayerKind::kLmHead},
    {"mlp_projector", LayerKind::kMlpProjector},
    {"resnet_block", LayerKind::kResnetBlock},
    {"spatial_transformer", LayerKind::kSpatialTransformer}};
const std::vector<std::pair<std::string, ModuleRole>> kRoles = {{"encoder", ModuleRole::kEncoder},
                                                                {"projector", ModuleRole::kProjector},
                                                                {"backbone", ModuleRole::kBackbone},
                                                                {"decoder", ModuleRole::kDecoder},
                                                                {"generator", ModuleRole::kGenerator}};
const std::vector<std::pair<std::string, Modality>> kModalities = {{"text", Modality::kText},
                                                                   {"image", Modality::kImage},
                                                                   {"video", Modality::kVideo},
                                                                   {"audio", Modality::kAudio},
                                                                   {"multimodal", Modality::kMultimodal}};
const std::vector<std::pair<std::string, TokenSource>> kSources = {
    {"text", TokenSource::kText},   {"image", TokenSource::kImage},   {"video", TokenSource::kVideo},
    {"audio", TokenSource::kAudio}, {"inputs", TokenSource::kInputs}, {"text+inputs", TokenSource::kTextAndInputs}};

// A layer's widths and sizes: products of two or three of them (parameters,
// FLOPs, activation bytes) must stay far inside int64, so each is at most
// 2^24 (the widest published layers are below 2^17).
constexpr int64_t kMaxDim = int64_t{1} << 24;
int64_t Dim(YamlMap& m, const std::string& key) {
  return m.Has(key) ? m.PositiveIntAtMost(key, 0, kMaxDim) : m.PositiveInt(key);  // missing: PositiveInt says so
}
int64_t Dim(YamlMap& m, const std::string& key, int64_t default_value) {
  return m.PositiveIntAtMost(key, default_value, kMaxDim);
}
int64_t Dim0(YamlMap& m, const std::string& key) {  // may be 0
  const int64_t v = m.NonNegativeInt(key, 0);
  if (v > kMaxDim) throw m.ErrorAt(key, fmt::format("must be at most {}, got {}", kMaxDim, v));
  return v;
}

const std::vector<std::pair<std::string, NormKind>> kNorms = {{"layer", NormKind::kLayerNorm},
                                                              {"rms", NormKind::kRmsNorm}};
const std::vector<std::pair<std::string, NormKind>> kFinalNorms = {
    {"none", NormKind::kNone}, {"layer", NormKind::kLayerNorm}, {"rms", NormKind::kRmsNorm}};
const std::vector<std::pair<std::string, Activation>> kActivations = {{"silu", Activation::kSilu},
                                                                      {"gelu", Activation::kGelu},
                                                                      {"gelu_tanh", Activation::kGeluTanh},
                                                                      {"quick_gelu", Activation::kQuickGelu}};

// Rotary positions: `rope_theta`, and Llama 3's `rope_scaling` map.
Rope ReadRope(YamlMap& m) {
  Rope r;
  if (!m.Has("rope_theta")) {
    for (const char* key : {"rope_scaling", "rope_max_positions"}) {
      if (m.Has(key)) throw m.ErrorAt(key, "needs rope_theta (the rotary base)");
    }
    return r;
  }
  r.theta = m.PositiveReal("rope_theta");
  if (m.Has("rope_max_positions")) r.max_positions = m.PositiveInt("rope_max_positions");
  if (std::optional<YAML::Node> node = m.OptionalChild("rope_scaling")) {
    YamlMap s(*node, m.file(), m.PathOf("rope_scaling"));
    s.Enum("type", {"llama3"});
    r.scaling = RopeScaling::kLlama3;
    r.factor = s.PositiveReal("factor");
    r.low_freq_factor = s.PositiveReal("low_freq_factor");
    r.high_freq_factor = s.PositiveReal("high_freq_factor");
    r.original_max_positions = s.PositiveInt("original_max_position_embeddings");
    if (r.high_freq_factor <= r.low_freq_factor) {
      throw s.ErrorAt("high_freq_factor", fmt::format("must exceed low_freq_factor ({})", r.low_freq_factor));
    }
    s.RejectUnknownKeys();
  }
  return r;
}

// What a transformer layer computes beyond its shapes (spec/layer.h).
void ReadArchitecture(YamlMap& m, Layer& l) {
  l.norm = ParseEnum<NormKind>(m, "norm", kNorms, NormKind::kLayerNorm);
  l.norm_eps = m.PositiveReal("norm_eps", 1e-5);
  l.qkv_bias = m.Bool("qkv_bias", false);
  l.out_bias = m.Bool("out_bias", false);
  l.mlp_bias = m.Bool("mlp_bias", false);
  l.qk_norm = m.Bool("qk_norm", false);
  l.activation = ParseEnum<Activation>(m, "activation", kActivations, Activation::kDefault);
  l.rope = ReadRope(m);
  if (l.rope.theta > 0 && l.HeadDim() % 2 != 0) {
    throw m.ErrorAt("rope_theta", fmt::format("rotary positions need an even head_dim, got {}", l.HeadDim()));
  }
}

void ReadAttention(YamlMap& m, Layer& l) {
  l.hidden = Dim(m, "hidden");
  l.heads = Dim(m, "heads");
  l.kv_heads = Dim(m, "kv_heads", l.heads);
  if (m.Has("head_dim")) l.head_dim = Dim(m, "head_dim");
  if (l.head_dim == 0 && l.hidden % l.heads != 0) {
    throw m.ErrorAt("heads", fmt::format("heads ({}) must divide hidden ({})", l.heads, l.hidden));
  }
  if (l.heads % l.kv_heads != 0) {
    throw m.ErrorAt("kv_heads", fmt::format("kv_heads ({}) must divide heads ({})", l.kv_heads, l.heads));
  }
  l.causal = m.Bool("causal", false);
}

Layer ReadLayer(YamlMap& m, bool module_frozen) {
  Layer l;
  l.kind = ParseEnum<LayerKind>(m, "kind", kLayerKinds, std::nullopt);
  switch (l.kind) {
    case LayerKind::kTransformer:
      ReadAttention(m, l);
      l.ffn_hidden = Dim(m, "ffn_hidden");
      l.gated_mlp = m.Bool("gated_mlp", false);
      l.cross_attention = m.Bool("cross_attention", false);
      l.context_dim = Dim(m, "context_dim", l.hidden);
      l.self_attention = m.Bool("self_attention", true);
      if (!l.self_attention && !l.cross_attention) {
        throw m.ErrorAt("self_attention", "false needs cross_attention: true (a layer attends to something)");
      }
      ReadArchitecture(m, l);
      break;
    case LayerKind::kConformer:
      ReadAttention(m, l);
      l.ffn_hidden = Dim(m, "ffn_hidden");
      l.conv_kernel = Dim(m, "conv_kernel", 3);
      break;
    case LayerKind::kPatchEmbed:
      l.in_channels = Dim(m, "in_channels", 3);
      l.kernel = Dim(m, "patch_px");
      l.temporal_patch = m.PositiveInt("temporal_patch", 1);
      l.hidden = Dim(m, "hidden");
      l.positions = Dim0(m, "positions");
      l.bias = m.Bool("bias", true);
      l.final_norm = ParseEnum<NormKind>(m, "out_norm", kFinalNorms, NormKind::kNone);
      l.norm_eps = m.PositiveReal("norm_eps", 1e-5);
      break;
    case LayerKind::kConv:
      l.in_channels = Dim(m, "in_channels");
      l.out_channels = Dim(m, "out_channels");
      l.kernel = Dim(m, "kernel");
      l.dims = m.PositiveInt("dims", 2);
      if (l.dims > 3) {
        throw m.ErrorAt("dims", fmt::format("must be 1, 2 or 3, got {}", l.dims));
      }
      l.positions = Dim0(m, "positions");
      l.stride = m.PositiveInt("stride", 1);
      l.spatial_divisor = m.PositiveInt("spatial_divisor", 1);
      break;
    case LayerKind::kEmbedding:
      l.vocab = Dim(m, "vocab");
      l.hidden = Dim(m, "hidden");
      l.positions = Dim0(m, "positions");
      break;
    case LayerKind::kLmHead:
      l.vocab = Dim(m, "vocab");
      l.hidden = Dim(m, "hidden");
      l.tied = m.Bool("tied", false);
      l.final_norm = ParseEnum<NormKind>(m, "final_norm", kFinalNorms, NormKind::kNone);
      l.norm_eps = m.PositiveReal("norm_eps", 1e-5);
      break;
    case LayerKind::kMlpProjector:
      l.in_dim = Dim(m, "in_dim");
      // `linear: true`: one matrix in_dim -> out_dim (Idefics3's connector, Gemma 3's projection).
      l.hidden = m.Bool("linear", false) ? 0 : Dim(m, "hidden");
      l.out_dim = Dim(m, "out_dim");
      l.bias = m.Bool("bias", true);
      l.activation = ParseEnum<Activation>(m, "activation", kActivations, Activation::kDefault);
      break;
    case LayerKind::kResnetBlock:
      l.in_channels = Dim(m, "in_channels");
      l.out_channels = Dim(m, "out_channels");
      l.spatial_divisor = m.PositiveInt("spatial_divisor", 1);
      l.time_embed_dim = Dim0(m, "time_embed_dim");
      break;
    case LayerKind::kSpatialTransformer:
      l.hidden = Dim(m, "channels");
      l.heads = Dim(m, "heads");
      if (l.hidden % l.heads != 0) {
        throw m.ErrorAt("heads", fmt::format("heads ({}) must divide channels ({})", l.heads, l.hidden));
      }
      l.kv_heads = l.heads;
      l.ffn_hidden = Dim(m, "ffn_hidden", 4 * l.hidden);
      l.gated_mlp = m.Bool("gated_mlp", true);
      l.cross_attention = true;
      l.context_dim = Dim(m, "context_dim");
      l.spatial_divisor = m.PositiveInt("spatial_divisor", 1);
      break;
  }
  l.frozen = m.Bool("frozen", module_frozen);
  return l;
}

const std::vector<std::pair<std::string, ImageTiling>> kTilings = {{"anyres", ImageTiling::kAnyRes},
                                                                   {"dynamic_tiles", ImageTiling::kDynamicTiles},
                                                                   {"split_global", ImageTiling::kSplitGlobal},
                                                                   {"pixtral", ImageTiling::kPixtral},
                                                                   {"fixed_tiles", ImageTiling::kFixedTiles}};

// tokens.tiling: {kind, tile_px, max_tiles, longest_px, grid_pinpoints, anyres_max}.
void ReadTiling(YamlMap& tokens, TokenRule& r) {
  YamlMap t(tokens.Child("tiling"), tokens.file(), tokens.PathOf("tiling"));
  r.tiling = ParseEnum<ImageTiling>(t, "kind", kTilings, std::nullopt);
  if (r.patch_px == 0) throw tokens.ErrorAt("tiling", "a tiling needs patch_px (not tokens_per_image)");
  if (r.tiling != ImageTiling::kPixtral) r.tile_px = t.PositiveInt("tile_px");
  if (r.tiling == ImageTiling::kDynamicTiles || r.tiling == ImageTiling::kFixedTiles) {
    r.max_tiles = t.PositiveIntAtMost("max_tiles", r.tiling == ImageTiling::kFixedTiles ? 4 : 12, 64);
  }
  if (r.tiling == ImageTiling::kSplitGlobal || r.tiling == ImageTiling::kPixtral) {
    r.longest_px = t.PositiveInt("longest_px");
  }
  if (r.tiling == ImageTiling::kAnyRes) {
    const YAML::Node pins = t.Child("grid_pinpoints");
    if (!pins.IsSequence() || pins.size() == 0) {
      throw t.ErrorAt("grid_pinpoints", "expected a non-empty list of [height, width] pixel pairs");
    }
    for (size_t i = 0; i < pins.size(); ++i) {
      int64_t hw[2] = {0, 0};
      for (int k = 0; k < 2 && pins[i].IsSequence() && pins[i].size() == 2; ++k) {
        try {
          hw[k] = pins[i][k].as<int64_t>();
        } catch (const YAML::Exception&) {
          hw[k] = 0;
        }
      }
      if (hw[0] < r.tile_px || hw[1] < r.tile_px || hw[0] % r.tile_px != 0 || hw[1] % r.tile_px != 0) {
        throw t.ErrorAt(
            "grid_pinpoints",
            fmt::format("entry {}: expected [height, width], both positive multiples of tile_px {}", i, r.tile_px));
      }
      r.grid_pinpoints.push_back({hw[0], hw[1]});
    }
    r.anyres_max = t.NonNegativeInt("anyres_max", 0);
  }
  if (r.tile_px > 0 && r.tile_px < r.patch_px) {
    throw t.ErrorAt("tile_px", fmt::format("{} is smaller than one patch ({} px)", r.tile_px, r.patch_px));
  }
  t.RejectUnknownKeys();
}

// An image resized to resize_px (or of tokens_per_image) hands on a fixed
// count of tokens (cost/token_stats.cpp's MergedImageTokens): resize_px must
// hold one merged patch, and drop_tokens leave a token (both were rounded or
// clamped in silence).
void CheckFixedImageTokens(const YamlMap& m, const TokenRule& r) {
  if (r.resize_px > 0 && r.patch_px > 0 && r.resize_px < r.patch_px * r.merge) {
    throw m.ErrorAt("resize_px",
                    fmt::format("{} px holds no {}-px patch{}; valid: at least {}", r.resize_px, r.patch_px * r.merge,
                                r.merge > 1 ? " (patch_px x merge)" : "", r.patch_px * r.merge));
  }
  int64_t fixed = 0;  // tokens per image after the merge; 0: they depend on the image
  if (r.out_tokens_per_image > 0) {
    fixed = r.out_tokens_per_image;
  } else if (r.tokens_per_image > 0) {
    fixed = std::max<int64_t>(1, r.tokens_per_image / (r.merge * r.merge)) + r.extra_tokens;
  } else if (r.resize_px > 0 && r.patch_px > 0) {
    const int64_t unit = r.patch_px * r.merge, units = std::max<int64_t>(1, (r.resize_px + unit / 2) / unit);
    fixed = units * units + r.extra_tokens;
  }
  if (fixed > 0 && r.drop_tokens >= fixed) {
    throw m.ErrorAt("drop_tokens", fmt::format("{} of the {} tokens an image hands on: none would be left; valid: "
                                               "0..{}",
                                               r.drop_tokens, fixed, fixed - 1));
  }
}

TokenRule ReadTokenRule(YamlMap& m) {
  TokenRule r;
  r.source = ParseEnum<TokenSource>(m, "source", kSources, std::nullopt);
  switch (r.source) {
    case TokenSource::kImage:
    case TokenSource::kVideo:
      if (m.Has("tokens_per_image")) {
        r.tokens_per_image = m.PositiveInt("tokens_per_image");
      } else {
        r.patch_px = m.PositiveInt("patch_px");
      }
      r.resize_px = m.NonNegativeInt("resize_px", 0);
      r.out_tokens_per_image = m.NonNegativeInt("out_tokens_per_image", 0);
      r.merge = m.PositiveInt("merge", 1);
      r.extra_tokens = m.NonNegativeInt("extra_tokens", 0);
      r.drop_tokens = m.NonNegativeInt("drop_tokens", 0);
      r.concat_layers = m.PositiveIntAtMost("concat_layers", 1, 64);
      if (r.source == TokenSource::kImage && m.Has("tiling")) ReadTiling(m, r);
      if (r.source == TokenSource::kImage && r.tiling == ImageTiling::kNone) CheckFixedImageTokens(m, r);
      if (r.source == TokenSource::kVideo) {
        r.frames_per_token = m.PositiveInt("frames_per_token", 1);
      }
      break;
    case TokenSource::kAudio:
      r.tokens_per_s = m.PositiveReal("tokens_per_s");
      break;
    case TokenSource::kInputs:
    case TokenSource::kTextAndInputs:
      r.downsample = m.PositiveInt("downsample", 1);
      break;
    case TokenSource::kText:
      r.max_tokens = m.NonNegativeInt("max_tokens", 0);
      break;
  }
  m.RejectUnknownKeys();
  return r;
}

struct Loader {
  std::set<std::string> loading;  // guards `from:` chains against cycles
  std::vector<std::string> files;  // the files `from:` read (Model::inherited_files)

  Model Parse(const std::string& text, const std::string& file);
  // modules[i] of a model file; its `inputs` names are returned in `inputs`.
  Module ParseModule(YamlMap& m, const std::string& file, std::vector<std::string>& inputs);
  // `from: model[/module]`: the named module, its `drop_kinds` removed.
  Module InheritModule(YamlMap& m, const std::string& file);
  Model LoadNamed(const std::string& name_or_path, const std::string& relative_to, const YamlMap& at,
                  const std::string& key);
};

Model Loader::LoadNamed(const std::string& ref, const std::string& relative_to, const YamlMap& at,
                        const std::string& key) {
  if (loading.count(ref)) {
    throw at.ErrorAt(key, fmt::format("'{}' refers back to itself through `from:`", ref));
  }
  loading.insert(ref);
  Model m;
  if (const char* text = FindZooModelText(ref)) {
    m = Parse(text, "zoo:" + ref + ".yaml");
  } else {
    std::filesystem::path p(ref);
    if (p.is_relative() && !relative_to.empty()) {
      p = std::filesystem::path(relative_to).parent_path() / p;
    }
    if (KindOfPath(p.string()) == PathKind::kNone) {
      throw at.ErrorAt(key, fmt::format("unknown model '{}': not a zoo name (see `loom models`) "
                                        "and no file {}",
                                        ref, p.string()));
    }
    if (KindOfPath(p.string()) == PathKind::kDirectory) {
      throw at.ErrorAt(key, fmt::format("'{}' is a directory; expected a zoo name or a model YAML file", p.string()));
    }
    files.push_back(p.string());
    try {
      m = Parse(ReadTextFile(p.string(), "model YAML"), p.string());
    } catch (const Error& e) {  // say which file's `from:` led there
      throw at.ErrorAt(key, fmt::format("in '{}': {}", p.string(), e.what()));
    }
  }
  loading.erase(ref);
  return m;
}

// The width a layer reads and the width it hands on (0: not checked: U-Net
// blocks change channels by design, a patch embedding reads pixels).
std::pair<int64_t, int64_t> LayerWidths(const Layer& l) {
  switch (l.kind) {
    case LayerKind::kTransformer:
    case LayerKind::kConformer:
      return {l.hidden, l.hidden};
    case LayerKind::kPatchEmbed:
      return {0, l.hidden};
    case LayerKind::kConv:
      return {l.in_channels, l.out_channels};
    case LayerKind::kEmbedding:
      return {0, l.hidden};
    case LayerKind::kLmHead:
      return {l.hidden, 0};
    case LayerKind::kMlpProjector:
      return {l.in_dim, l.out_dim};
    default:
      return {0, 0};
  }
}
// The field that states a layer's input width.
const char* WidthKey(const Layer& l) {
  switch (l.kind) {
    case LayerKind::kConv:
      return "in_channels";
    case LayerKind::kMlpProjector:
      return "in_dim";
    default:
      return "hidden";
  }
}

// A module whose sequences are (or hold) its inputs' tokens.
bool SplicesInputs(const Module& m) {
  return m.tokens.source == TokenSource::kInputs || m.tokens.source == TokenSource::kTextAndInputs;
}
// U-Net blocks form no chain of widths (side branches, skips, a timestep MLP).
bool IsUnet(const Module& m) {
  return std::any_of(m.layers.begin(), m.layers.end(), [](const Layer& l) {
    return l.kind == LayerKind::kResnetBlock || l.kind == LayerKind::kSpatialTransformer;
  });
}

// The token rule cuts images into the patches the patch embedding takes
// (on VAE latents, in_channels other than 3, a multiple: patch x VAE factor).
void CheckPatchSize(const Module& mod, const YamlMap& m) {
  const TokenRule& rule = mod.tokens;
  if ((rule.source == TokenSource::kImage || rule.source == TokenSource::kVideo) && rule.tokens_per_image == 0 &&
      rule.patch_px > 0) {
    const auto pe = std::find_if(mod.layers.begin(), mod.layers.end(),
                                 [](const Layer& l) { return l.kind == LayerKind::kPatchEmbed; });
    if (pe != mod.layers.end() && pe->kernel > 0 && rule.patch_px != pe->kernel &&
        !(pe->in_channels != 3 && rule.patch_px % pe->kernel == 0)) {
      throw m.ErrorAt(m.Has("tokens") ? "tokens" : "name",
                      fmt::format("module {}: tokens.patch_px {} px per token, but its patch_embed cuts {} px "
                                  "patches; valid: patch_px {} (or, on VAE latents, a multiple of it)",
                                  mod.name, rule.patch_px, pe->kernel, pe->kernel));
    }
  }
}

// A tied LM head is its module's embedding matrix, so of its vocab and width
// (an untied head may score fewer tokens than the embedding reads: Mllama's
// reads 8 image tokens more; labels are checked against the head's).
void CheckTiedHead(const Module& mod, const YamlMap& m) {
  const auto of = [&](LayerKind kind) {
    return std::find_if(mod.layers.begin(), mod.layers.end(), [&](const Layer& l) { return l.kind == kind; });
  };
  const auto embedding = of(LayerKind::kEmbedding), head = of(LayerKind::kLmHead);
  if (head == mod.layers.end() || !head->tied) return;
  if (embedding != mod.layers.end() && embedding->vocab == head->vocab && embedding->hidden == head->hidden) return;
  throw m.ErrorAt(
      "layers",
      fmt::format("module {}: its lm_head is tied, but {}; valid: a tied head of the vocab and hidden "
                  "of its module's embedding, or tied: false",
                  mod.name,
                  embedding == mod.layers.end() ? std::string("the module has no embedding to share")
                                                : fmt::format("it is {} x {} and the embedding {} x {}", head->vocab,
                                                              head->hidden, embedding->vocab, embedding->hidden)));
}

// What module mi reads, once its inputs are resolved (`preds`): a source
// that splices inputs has some, cross-attention has a context, a projector
// takes its input's width. Errors point at the module's entry `m`.
void CheckModuleInputs(const Model& model, int mi, const std::vector<std::vector<int>>& preds, const YamlMap& m) {
  const Module& mod = model.modules[mi];
  const bool needs_inputs = SplicesInputs(mod);
  if (needs_inputs && preds[mi].empty()) {
    throw m.ErrorAt(m.Has("tokens") ? "tokens" : "name",
                    fmt::format("module {}: source '{}' needs a non-empty `inputs` list; valid: inputs: [MODULE, "
                                "...], or tokens: {{source: text}}",
                                mod.name, TokenSourceName(mod.tokens.source)));
  }
  // Cross-attention reads its module's inputs as context (a DiT's text
  // encoder); a module whose inputs are spliced into its own tokens, or a
  // module of a larger model that reads nothing, has none to attend to. A
  // lone component (sd-2.1, dit-5b) is priced with its context's tokens.
  const bool cross =
      std::any_of(mod.layers.begin(), mod.layers.end(), [](const Layer& l) { return l.cross_attention; });
  if (cross && (needs_inputs || (preds[mi].empty() && model.modules.size() > 1))) {
    throw m.ErrorAt(preds[mi].empty() ? "name" : "inputs",
                    fmt::format("module {}: its layers cross-attend, but {}; valid: inputs: [CONTEXT MODULE] with "
                                "tokens of its own, or no cross_attention",
                                mod.name,
                                needs_inputs ? "its inputs are spliced into its tokens (source '" +
                                                   std::string(TokenSourceName(mod.tokens.source)) + "')"
                                             : "it has no inputs to attend to"));
  }
  // A projector reading one module takes that module's output width, times
  // the merged patches (Qwen2-VL's 2x2 merge: 4 x hidden). A U-Net's first
  // MLP embeds the timestep; what it reads comes as cross-attention context.
  const bool unet = IsUnet(mod);
  if (preds[mi].size() == 1 && !unet && !mod.layers.empty() && mod.layers.front().kind == LayerKind::kMlpProjector) {
    const Module& from = model.modules[preds[mi][0]];
    const int64_t out = from.layers.empty() ? 0 : LayerWidths(from.layers.back()).second;
    const int64_t want = out * from.tokens.merge * from.tokens.merge * from.tokens.concat_layers;
    if (out > 0 && mod.layers.front().in_dim != want) {
      throw m.ErrorAt("name", fmt::format("module {}: its projector takes in_dim {}, but {} hands on {}{}", mod.name,
                                          mod.layers.front().in_dim, from.name, want,
                                          from.tokens.merge > 1 ? fmt::format(" (width {} x its {}x{} merge)", out,
                                                                              from.tokens.merge, from.tokens.merge)
                                                                : ""));
    }
  }
}

// A projector hands its tokens to the modules that splice them: its out_dim
// is their first layer's width (an LLM's embedding or first block).
void CheckProjectorOutputs(const Model& model, const std::vector<std::vector<int>>& preds,
                           const std::vector<YAML::Node>& input_nodes, const std::string& file) {
  const size_t n = model.modules.size();
  for (size_t i = 0; i < n; ++i) {
    const Module& to = model.modules[i];
    const bool splices = SplicesInputs(to);
    if (!splices || IsUnet(to) || to.layers.empty()) continue;
    // Spliced tokens join an embedding's output, or enter the first block.
    const Layer& first = to.layers.front();
    const int64_t width = first.kind == LayerKind::kEmbedding ? LayerWidths(first).second : LayerWidths(first).first;
    for (int j : preds[i]) {
      const Module& from = model.modules[j];
      if (from.layers.empty() || from.layers.back().kind != LayerKind::kMlpProjector) continue;
      if (width > 0 && from.layers.back().out_dim != width) {
        YamlMap m(input_nodes[i], file, fmt::format("modules[{}]", i));
        throw m.ErrorAt("inputs", fmt::format("module {} splices {}'s tokens, whose projector hands on out_dim {}, but "
                                              "{}'s first layer is {} wide; valid: out_dim {}",
                                              to.name, from.name, from.layers.back().out_dim, to.name, width, width));
      }
    }
  }
}

// The module's own layers (`layers:`), each entry `count` times, checked for
// the width each hands on to the next.
void ReadModuleLayers(YamlMap& m, const std::string& file, Module& mod) {
  YAML::Node layers = m.Child("layers");
  if (!layers.IsSequence() || layers.size() == 0) {
    throw m.ErrorAt("layers", "expected a non-empty list of layers");
  }
  std::vector<std::pair<Layer, size_t>> entries;  // (layer, entry index)
  bool unet = false;  // U-Net blocks form no chain (side branches, skips): not width-checked
  for (size_t j = 0; j < layers.size(); ++j) {
    YamlMap lm(layers[j], file, m.PathOf(fmt::format("layers[{}]", j)));
    // A model of more layers than any trained one by orders of magnitude is a typo.
    int64_t count = lm.PositiveIntAtMost("count", 1, kMaxModelLayers);
    Layer layer = ReadLayer(lm, mod.frozen);
    lm.RejectUnknownKeys();
    unet = unet || layer.kind == LayerKind::kResnetBlock || layer.kind == LayerKind::kSpatialTransformer;
    entries.emplace_back(layer, j);
    mod.layers.insert(mod.layers.end(), count, layer);
  }
  // Consecutive layers agree on the width they pass (docs/spec-format.md).
  for (size_t e = 1; e < entries.size() && !unet; ++e) {
    const int64_t out = LayerWidths(entries[e - 1].first).second, in = LayerWidths(entries[e].first).first;
    if (out > 0 && in > 0 && in != out) {
      YamlMap lm(layers[entries[e].second], file, m.PathOf(fmt::format("layers[{}]", entries[e].second)));
      throw lm.ErrorAt(WidthKey(entries[e].first),
                       fmt::format("{} takes width {}, but layers[{}] hands on {}",
                                   LayerKindName(entries[e].first.kind), in, entries[e - 1].second, out));
    }
  }
}

// Resolves the modules' `inputs` names, checks the graph (no dangling edge,
// no cycle) and sorts the modules topologically, stable (file order among
// ready modules).
void OrderModules(Model& model, const std::vector<std::vector<std::string>>& input_names,
                  const std::vector<YAML::Node>& input_nodes, const YAML::Node& modules, const std::string& file) {
  const size_t n = model.modules.size();
  std::vector<std::vector<int>> preds(n);
  for (size_t i = 0; i < n; ++i) {
    YamlMap m(input_nodes[i], file, fmt::format("modules[{}]", i));
    for (const auto& in : input_names[i]) {
      int j = model.FindModule(in);
      if (j < 0) {
        std::string names;
        for (const auto& mm : model.modules) {
          names += (names.empty() ? "" : ", ") + mm.name;
        }
        throw m.ErrorAt("inputs", fmt::format("dangling edge: no module named '{}'; modules: {}", in, names));
      }
      preds[i].push_back(j);
    }
    CheckModuleInputs(model, static_cast<int>(i), preds, m);
  }
  CheckProjectorOutputs(model, preds, input_nodes, file);
  // Kahn's algorithm, stable (keeps file order among ready modules).
  std::vector<int> indeg(n, 0), order;
  for (size_t i = 0; i < n; ++i) {
    indeg[i] = static_cast<int>(preds[i].size());
  }
  std::vector<bool> done(n, false);
  while (order.size() < n) {
    int pick = -1;
    for (size_t i = 0; i < n; ++i) {
      if (!done[i] && indeg[i] == 0) {
        pick = static_cast<int>(i);
        break;
      }
    }
    if (pick < 0) {
      std::string cyc;
      for (size_t i = 0; i < n; ++i) {
        if (!done[i]) {
          cyc += (cyc.empty() ? "" : ", ") + model.modules[i].name;
        }
      }
      throw Error(
          fmt::format("{}: modules: the module graph has a cycle through: {}; "
                      "`inputs` must form a DAG",
                      Where(modules, file), cyc));
    }
    done[pick] = true;
    order.push_back(pick);
    for (size_t i = 0; i < n; ++i) {
      for (int p : preds[i]) {
        if (p == pick) {
          --indeg[i];
        }
      }
    }
  }
  std::vector<int> new_index(n);
  for (size_t k = 0; k < n; ++k) {
    new_index[order[k]] = static_cast<int>(k);
  }
  std::vector<Module> sorted(n);
  for (size_t i = 0; i < n; ++i) {
    Module mod = std::move(model.modules[i]);
    for (int p : preds[i]) {
      mod.inputs.push_back(new_index[p]);
    }
    sorted[new_index[i]] = std::move(mod);
  }
  model.modules = std::move(sorted);
}

Module Loader::InheritModule(YamlMap& m, const std::string& file) {
  std::string ref = m.String("from");
  std::string model_ref = ref, module_ref;
  if (auto slash = ref.rfind('/'); slash != std::string::npos && FindZooModelText(ref) == nullptr &&
                                   FindZooModelText(ref.substr(0, slash)) != nullptr) {
    model_ref = ref.substr(0, slash);
    module_ref = ref.substr(slash + 1);
  }
  Model base = LoadNamed(model_ref, file, m, "from");
  int idx = 0;
  if (!module_ref.empty()) {
    idx = base.FindModule(module_ref);
    if (idx < 0) {
      throw m.ErrorAt("from", fmt::format("model '{}' has no module '{}'", model_ref, module_ref));
    }
  } else if (base.modules.size() != 1) {
    std::string names;
    for (const auto& bm : base.modules) {
      names += (names.empty() ? "" : ", ") + model_ref + "/" + bm.name;
    }
    throw m.ErrorAt("from",
                    fmt::format("model '{}' has {} modules; name one: {}", model_ref, base.modules.size(), names));
  }
  Module mod = base.modules[idx];
  mod.inputs.clear();
  // `drop_kinds: [lm_head]` reuses an LLM as a text encoder without its head.
  if (auto drop = m.OptionalChild("drop_kinds")) {
    if (!drop->IsSequence()) throw m.ErrorAt("drop_kinds", "expected a list of layer kinds");
    for (size_t k = 0; k < drop->size(); ++k) {
      const std::string kind = ScalarText((*drop)[k], m.file(), m.PathOf(fmt::format("drop_kinds[{}]", k)));
      bool known = false;
      for (const auto& [n, e] : kLayerKinds) {
        if (n == kind) {
          known = true;
          std::erase_if(mod.layers, [e = e](const Layer& l) { return l.kind == e; });
        }
      }
      if (!known) {
        std::vector<std::string> names;
        for (const auto& [n, e] : kLayerKinds) names.push_back(n);
        throw m.ErrorAt("drop_kinds", fmt::format("unknown layer kind '{}'; valid: {}{}", kind, fmt::join(names, ", "),
                                                  DidYouMean(kind, names)));
      }
    }
    if (mod.layers.empty()) {
      throw m.ErrorAt("drop_kinds", "drops every layer of the module");
    }
  }
  return mod;
}

Module Loader::ParseModule(YamlMap& m, const std::string& file, std::vector<std::string>& ins) {
  Module mod;
  const std::string name = m.String("name");
  // The runtime names its layers "{module}_{layer}" and parameters
  // "{module}_{layer}.{weight}": torch refuses a submodule name with a dot.
  if (name.empty() || name.find('.') != std::string::npos) {
    throw m.ErrorAt("name", fmt::format("'{}': a module name must be non-empty and without '.' (torch submodule "
                                        "and parameter names); valid: letters, digits, '_', '-'",
                                        name));
  }
  const bool has_from = m.Has("from");
  if (has_from) mod = InheritModule(m, file);
  mod.name = name;
  mod.role = ParseEnum<ModuleRole>(m, "role", kRoles, has_from ? std::optional(mod.role) : std::nullopt);
  mod.modality = ParseEnum<Modality>(m, "modality", kModalities, has_from ? std::optional(mod.modality) : std::nullopt);
  bool frozen_before = mod.frozen;
  mod.frozen = m.Bool("frozen", has_from ? mod.frozen : false);
  const std::string mask = m.String("attention_mask", mod.bitfield_attention ? "bitfield" : "document");
  if (mask != "document" && mask != "bitfield") {
    throw m.ErrorAt("attention_mask", fmt::format("'{}'; valid: document, bitfield", mask));
  }
  mod.bitfield_attention = mask == "bitfield";
  mod.weights_prefix = m.String("weights_prefix", mod.weights_prefix);
  if (has_from && mod.frozen != frozen_before) {
    for (auto& l : mod.layers) {
      l.frozen = mod.frozen;
    }
  }
  if (auto tokens = m.OptionalChild("tokens")) {
    YamlMap t(*tokens, file, m.PathOf("tokens"));
    mod.tokens = ReadTokenRule(t);
  } else if (!has_from) {
    throw m.ErrorAt("tokens", "missing required field (source: text|image|video|audio|inputs|text+inputs)");
  }
  if (has_from && m.Has("layers")) {
    throw m.ErrorAt("layers", "give either `from` or `layers`, not both");
  }
  if (!has_from) ReadModuleLayers(m, file, mod);
  CheckPatchSize(mod, m);
  CheckTiedHead(mod, m);
  if (auto in = m.OptionalChild("inputs")) {
    if (!in->IsSequence()) {
      throw m.ErrorAt("inputs", "expected a list of module names");
    }
    for (size_t i = 0; i < in->size(); ++i) {
      const std::string path = m.PathOf(fmt::format("inputs[{}]", i));
      ins.push_back(ScalarText((*in)[i], m.file(), path));
      // A module listed twice would hand on its tokens twice.
      if (std::find(ins.begin(), ins.end() - 1, ins.back()) != ins.end() - 1) {
        throw Error(fmt::format("{}: {}: module {} is already an input; name each once", Where((*in)[i], m.file()),
                                path, ins.back()));
      }
    }
  }
  return mod;
}

// The model file's fields in the order docs/spec-format.md documents them,
// each read and checked where it appears so that its error names its own line.
Model Loader::Parse(const std::string& text, const std::string& file) {
  // A Hugging Face config.json: its translation into model YAML (spec/hf_config.h),
  // named after its folder (`Qwen2-VL-7B/config.json`) or else its file.
  // A .json file is one too, so that its errors are a config.json's (a trailing
  // comma or a missing model_type was read as YAML: "model: missing required field").
  const bool json_file = file.size() >= 5 && file.compare(file.size() - 5, 5, ".json") == 0;
  if (json_file || LooksLikeHfConfig(text)) {
    const std::filesystem::path p(file);
    std::string name = p.stem().string();
    if (name == "config" && p.has_parent_path()) name = p.parent_path().filename().string();
    Model model = Parse(HfConfigToModelYaml(text, file, name), file + " (as Loom model YAML)");
    model.hf_config = file;
    return model;
  }
  YAML::Node root = ParseYaml(text, file);
  if (!root.IsDefined() || root.IsNull()) {
    throw Error(fmt::format("{}: empty model spec; expected fields model, modules", file));
  }
  YamlMap doc(root, file, "");
  Model model;
  model.name = doc.String("model");
  if (model.name.empty()) throw doc.ErrorAt("model", "empty; valid: the model's name");
  model.description = doc.String("description", "");
  model.planning_only = doc.String("planning_only", "");
  model.image_token_id = doc.Has("image_token_id") ? doc.NonNegativeInt("image_token_id", 0) : -1;
  model.source = file;
  YAML::Node modules = doc.Child("modules");
  if (!modules.IsSequence() || modules.size() == 0) {
    throw doc.ErrorAt("modules", "expected a non-empty list of modules");
  }
  doc.RejectUnknownKeys();

  std::vector<std::vector<std::string>> input_names;
  std::vector<YAML::Node> input_nodes;
  for (size_t i = 0; i < modules.size(); ++i) {
    YamlMap m(modules[i], file, fmt::format("modules[{}]", i));
    std::vector<std::string> ins;
    Module mod = ParseModule(m, file, ins);
    m.RejectUnknownKeys();
    if (model.FindModule(mod.name) >= 0) {
      throw m.ErrorAt("name", fmt::format("duplicate module name '{}'", mod.name));
    }
    model.modules.push_back(std::move(mod));
    input_names.push_back(ins);
    input_nodes.push_back(modules[i]);
  }
  OrderModules(model, input_names, input_nodes, modules, file);
  return model;
}

}  // namespace

int Model::FindModule(const std::string& name) const {
  for (size_t i = 0; i < modules.size(); ++i) {
    if (modules[i].name == name) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

int Model::num_layers() const {
  int n = 0;
  for (const auto& m : modules) {
    n += static_cast<int>(m.layers.size());
  }
  return n;
}

Model ParseModel(const std::string& yaml_text, const std::string& file) {
  Loader loader;
  Model m = loader.Parse(yaml_text, file);
  m.inherited_files = loader.files;
  size_t layers = 0;
  for (const auto& mod : m.modules) layers += mod.layers.size();
  if (layers > static_cast<size_t>(kMaxModelLayers)) {
    throw Error(fmt::format("{}: model {} has {} layers; valid: at most {} in all its modules", file, m.name, layers,
                            kMaxModelLayers));
  }
  // Loom plans training: a model with no trainable layer has nothing to train
  // (its "MFU" would count forwards only). Components reached by `from:` may
  // be frozen whole; the model as a whole may not.
  bool trainable = false;
  for (const auto& mod : m.modules) {
    for (const auto& l : mod.layers) trainable = trainable || !l.frozen;
  }
  if (!trainable) {
    throw Error(
        fmt::format("{}: model {}: every layer is frozen, so there is nothing to train; valid: at least one "
                    "module or layer without `frozen: true`",
                    file, m.name));
  }
  return m;
}

Model LoadModel(const std::string& name_or_path) {
  if (const char* text = FindZooModelText(name_or_path)) {
    return ParseModel(text, "zoo:" + name_or_path + ".yaml");
  }
  if (KindOfPath(name_or_path) == PathKind::kDirectory) {
    // A Hugging Face model folder: its config.json (its weights are the runtime's, runtime/hf_weights.h).
    const std::string config = (std::filesystem::path(name_or_path) / "config.json").string();
    if (KindOfPath(config) != PathKind::kNone) {
      if (const std::string what = NotARegularFile(config); !what.empty()) {  // a pipe would block open()
        throw Error(fmt::format("{}: {}; expected the model's config.json", config, what));
      }
      return ParseModel(ReadTextFile(config, "Hugging Face config.json"), config);
    }
    throw Error(
        fmt::format("{}: is a directory without config.json; expected a built-in model name, a model "
                    "YAML file or a Hugging Face model folder",
                    name_or_path));
  }
  if (KindOfPath(name_or_path) != PathKind::kNone) {
    return ParseModel(ReadTextFile(name_or_path, "model YAML"), name_or_path);
  }
  std::string names;
  for (const auto& n : ZooModelNames()) {
    names += (names.empty() ? "" : ", ") + n;
  }
  throw Error(
      fmt::format("unknown model '{}': not a built-in name and no such file{}; "
                  "built-in models: {}",
                  name_or_path, DidYouMean(name_or_path, ZooModelNames()), names));
}

}  // namespace loom
