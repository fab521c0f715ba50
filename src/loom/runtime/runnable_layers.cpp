#include "loom/runtime/runnable_layers.h"

#include <fmt/format.h>

#include <string>

#include "loom/error.h"
#include "loom/runtime/packing.h"

namespace loom::runtime {

namespace {

// Width a layer reads, for a layer that reads the previous one's output (0: it reads its own data).
int64_t InputWidth(const Layer& l, bool first) {
  switch (l.kind) {
    case LayerKind::kMlpProjector:
      return l.in_dim;
    case LayerKind::kConv:
      return first ? 0 : l.in_channels;
    case LayerKind::kEmbedding:
      return l.hidden;  // the width of the tokens spliced in front of the text
    case LayerKind::kPatchEmbed:
      return 0;
    default:
      return l.hidden;
  }
}

}  // namespace

void CheckRunnable(const Model& model, const std::vector<LayerRange>& layers) {
  if (!model.planning_only.empty()) {
    throw Error(fmt::format("runtime: model {} is read for planning only: {}", model.name, model.planning_only));
  }
  for (const auto& r : layers) {
    const int mi = model.FindModule(r.module);
    const loom::Module& m = model.modules[mi];
    if (m.tokens.tiling != ImageTiling::kNone) {
      throw Error(
          fmt::format("runtime: {}: the {} image tiling is priced by the planner but not built yet; runs "
                      "take one sequence per image",
                      r.module, ImageTilingName(m.tokens.tiling)));
    }
    if (m.tokens.concat_layers > 1) {
      throw Error(fmt::format("runtime: {}: handing on {} layers' hidden states side by side is not built yet",
                              r.module, m.tokens.concat_layers));
    }
    const bool own_data = m.tokens.source != TokenSource::kInputs && m.tokens.source != TokenSource::kTextAndInputs;
    for (int li = r.begin; li < r.end; ++li) {
      const Layer& l = m.layers[li];
      const std::string where = fmt::format("{} layer {} ({})", r.module, li, LayerKindName(l.kind));
      auto first_only = [&] {
        if (li != 0) throw Error(fmt::format("runtime: {}: an embedding must be its module's first layer", where));
      };
      switch (l.kind) {
        case LayerKind::kEmbedding:
          first_only();
          if (m.tokens.source != TokenSource::kText && m.tokens.source != TokenSource::kTextAndInputs) {
            throw Error(
                fmt::format("runtime: {}: a token embedding reads text (token source text or text+inputs)", where));
          }
          break;
        case LayerKind::kPatchEmbed:
          first_only();
          if (m.tokens.source != TokenSource::kImage && m.tokens.source != TokenSource::kVideo &&
              m.tokens.source != TokenSource::kAudio) {
            throw Error(fmt::format("runtime: {}: a patch embedding reads images, video or audio", where));
          }
          break;
        case LayerKind::kConv:
          if (l.dims != 1) {
            throw Error(
                fmt::format("runtime: {}: only 1-d convolutions (audio stems) are built, not dims {}", where, l.dims));
          }
          if (li == 0 && m.tokens.source != TokenSource::kAudio) {
            throw Error(fmt::format("runtime: {}: a conv stem reads audio features (token source audio)", where));
          }
          if (li > 0 && l.stride != 1) {
            throw Error(
                fmt::format("runtime: {}: a conv after the first layer must keep the tokens (stride 1, "
                            "got {})",
                            where, l.stride));
          }
          break;
        case LayerKind::kTransformer:
          if (l.cross_attention) throw Error(fmt::format("runtime: {}: cross-attention is not built yet", where));
          break;
        case LayerKind::kMlpProjector:
          if (l.hidden == 0)
            throw Error(fmt::format("runtime: {}: a one-matrix (linear) projector is not built yet", where));
          break;
        case LayerKind::kLmHead:
          if (l.tied && (m.layers[0].kind != LayerKind::kEmbedding || m.layers[0].vocab != l.vocab ||
                         m.layers[0].hidden != l.hidden)) {
            throw Error(
                fmt::format("runtime: {}: a tied LM head needs its module's first layer to be an embedding "
                            "of the same vocab and hidden",
                            where));
          }
          break;
        default:
          throw Error(
              fmt::format("runtime: {}: the runtime cannot build this layer kind yet; it builds "
                          "patch_embed, 1-d conv, embedding, transformer, mlp_projector and lm_head",
                          where));
      }
      // What flows in must have the width the layer reads.
      if (li > 0) {
        const int64_t in = InputWidth(l, false), have = OutputWidth(model, mi, li - 1);
        if (in != have) {
          throw Error(
              fmt::format("runtime: {}: reads width {} but layer {} hands on width {}", where, in, li - 1, have));
        }
      } else if (!own_data) {
        for (int p : m.inputs) {
          const loom::Module& src = model.modules[p];
          const int64_t merge = MergeGroup(src);
          const int64_t have = merge * OutputWidth(model, p, static_cast<int>(src.layers.size()) - 1);
          if (InputWidth(l, true) != have) {
            throw Error(fmt::format("runtime: {}: reads width {} but input module {} hands on width {}{}", where,
                                    InputWidth(l, true), src.name, have,
                                    merge > 1 ? fmt::format(" ({} merged tokens)", merge) : ""));
          }
        }
      }
    }
  }
}

}  // namespace loom::runtime
