#include "loom/runtime/packing.h"

#include <fmt/format.h>

#include "loom/cost/token_stats.h"
#include "loom/error.h"

namespace loom::runtime {

int64_t MicrobatchPacking::Tokens(int module) const {
  int64_t n = 0;
  for (const auto& s : modules[module]) n += s.tokens;
  return n;
}

std::vector<int64_t> MicrobatchPacking::Lengths(int module) const {
  std::vector<int64_t> out;
  for (const auto& s : modules[module]) out.push_back(s.tokens);
  return out;
}

int64_t MicrobatchPacking::TextTokens() const {
  int64_t n = 0;
  for (const auto& s : modules.back()) {
    for (const auto& p : s.parts) n += p.source < 0 ? p.tokens : 0;
  }
  return n;
}

int64_t BatchTextTokens(const Batch& batch) {
  int64_t n = 0;
  for (const auto& s : batch.samples) n += s.text_tokens;
  return n;
}

namespace {

void CheckPackable(const Module& m) {
  const TokenRule& r = m.tokens;
  auto fail = [&](const std::string& what) {
    throw Error(fmt::format("runtime: module {}: {} is not run yet", m.name, what));
  };
  switch (r.source) {
    case TokenSource::kImage:
    case TokenSource::kVideo:
      if (r.tokens_per_image > 0 || r.out_tokens_per_image > 0) {
        fail("an image rule with fixed or pooled tokens (tokens_per_image, out_tokens_per_image)");
      }
      if (r.drop_tokens > 0 && (r.merge > 1 || r.source == TokenSource::kVideo)) {
        fail("drop_tokens with a merge or a video");
      }
      if (r.merge > 1 && r.extra_tokens > 0) {
        fail(fmt::format("a merge by {} of images with {} extra tokens", r.merge, r.extra_tokens));
      }
      break;
    case TokenSource::kInputs:
    case TokenSource::kTextAndInputs:
      if (r.downsample != 1) fail(fmt::format("token downsampling by {}", r.downsample));
      break;
    case TokenSource::kAudio:
    case TokenSource::kText:
      break;
  }
}

// A tokenized sample's one document with its images where its image tokens
// are: text parts read the row at their own positions, the k-th input part
// takes the k-th run of image tokens, which must be as long.
PackedSequence Interleaved(const SampleTokens& tokens, int x, const std::vector<Part>& inputs, const Module& m) {
  if (inputs.size() != tokens.image_runs.size()) {
    throw Error(fmt::format("{}: {} runs of image token {} in input_ids, but module {} reads {} image sequences",
                            tokens.where, tokens.image_runs.size(), tokens.image_token_id, m.name, inputs.size()));
  }
  PackedSequence s{x, 0, -1, tokens.length, {}};
  int64_t at = 0;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const auto [position, length] = tokens.image_runs[k];
    if (inputs[k].tokens != length) {
      throw Error(
          fmt::format("{}: input_ids: image {} is {} image tokens (from position {}), but the model hands on "
                      "{} per image; give as many image tokens as the model's image features",
                      tokens.where, k, length, position, inputs[k].tokens));
    }
    if (position > at) s.parts.push_back({-1, at, position - at});
    Part image = inputs[k];
    image.row = position;
    s.parts.push_back(image);
    at = position + length;
  }
  if (s.tokens > at) s.parts.push_back({-1, at, s.tokens - at});
  return s;
}

// A tokenized sample's preprocessed pixels are cut into patch_px patches as
// they are (EmbedImpl::PatchesInto; no resize in the runtime): they must make the
// tokens the model gives an image, else the sample's line says so before any
// worker starts.
void CheckPixelSize(const SampleTokens& tokens, size_t item, const ImageInput& im, int64_t image_tokens,
                    const Module& m) {
  const TokenRule& r = m.tokens;
  for (const Layer& l : m.layers) {
    if (l.kind != LayerKind::kPatchEmbed || l.in_channels <= 0 || tokens.pixel_channels <= 0 ||
        tokens.pixel_channels == l.in_channels) {
      continue;
    }
    throw Error(
        fmt::format("{}: pixel_values: {}: {} channel(s) an image; module {} takes {} (preprocess the images "
                    "as its image processor does: RGB)",
                    tokens.where, tokens.pixel_values_file, tokens.pixel_channels, m.name, l.in_channels));
  }
  if (r.tiling != ImageTiling::kNone || r.patch_px <= 0) return;
  const int64_t patches = (im.width_px / r.patch_px) * (im.height_px / r.patch_px);
  if (patches + r.extra_tokens == image_tokens) return;
  const std::string side = r.resize_px > 0 ? fmt::format("{0}x{0}", r.resize_px) : "a size whose patches make them";
  throw Error(
      fmt::format("{}: pixel_values: {}: image {} is {}x{} pixels (width x height), {} patches of {} px; "
                  "module {} takes {} patches an image: preprocess the images to {}",
                  tokens.where, tokens.pixel_values_file, item, im.width_px, im.height_px, patches, r.patch_px, m.name,
                  image_tokens - r.extra_tokens, side));
}

}  // namespace

MicrobatchPacking PackMicrobatch(const Model& model, const Batch& batch, const std::vector<int>& samples) {
  std::vector<SamplePiece> pieces;
  for (int x : samples) pieces.push_back({x, -1});
  return PackMicrobatch(model, batch, pieces);
}

MicrobatchPacking PackMicrobatch(const Model& model, const Batch& batch, std::span<const SamplePiece> pieces) {
  if (pieces.empty()) throw Error("runtime: a microbatch without samples");
  MicrobatchPacking out;
  out.modules.resize(model.modules.size());
  for (size_t mi = 0; mi < model.modules.size(); ++mi) {
    const Module& m = model.modules[mi];
    CheckPackable(m);
    auto& seqs = out.modules[mi];
    // Where each input module's sequences of the piece (and document) start in its packed output.
    auto inputs_of = [&](const SamplePiece& piece, int doc, bool whole_sample) {
      std::vector<Part> parts;
      for (int p : m.inputs) {
        const int64_t group = MergeGroup(model.modules[p]);
        // An image module handing on fewer tokens than it makes drops the
        // first ones (LLaVA's vision_feature_select_strategy "default" drops
        // CLIP's class token, transformers' `selected_image_feature[:, 1:]`).
        const int64_t dropped = model.modules[p].tokens.drop_tokens;
        int64_t offset = 0;
        for (const auto& s : out.modules[p]) {
          if (s.sample == piece.sample && (piece.item < 0 || s.image == piece.item) && (whole_sample || s.doc == doc)) {
            if (dropped > 0) {
              if (dropped >= s.tokens) {
                throw Error(
                    fmt::format("runtime: module {}: drop_tokens {} leaves nothing of the {} tokens an image "
                                "makes",
                                model.modules[p].name, dropped, s.tokens));
              }
              parts.push_back({p, offset + dropped, s.tokens - dropped, 1});
            } else {
              parts.push_back({p, offset, s.tokens / group, group});
            }
          }
          offset += s.tokens;
        }
      }
      return parts;
    };
    for (const SamplePiece& piece : pieces) {
      const int x = piece.sample;
      const Sample& sample = batch.samples.at(x);
      if (piece.item >= static_cast<int>(sample.images.size())) {
        throw Error(fmt::format("runtime: sample {} has {} images, not an item {}: only image items are run", x,
                                sample.images.size(), piece.item));
      }
      switch (m.tokens.source) {
        case TokenSource::kText:
          if (piece.item >= 0) break;  // a single image carries no text
          if (sample.tokens && !sample.tokens->image_runs.empty()) {
            throw Error(
                fmt::format("{}: has {} images, but module {} reads text alone; a model with an image tower "
                            "(LLaVA) reads them",
                            sample.tokens->where, sample.tokens->image_runs.size(), m.name));
          }
          for (int d = 0; d < sample.num_docs(); ++d) {
            int64_t t = sample.doc_text_tokens[d];
            if (m.tokens.max_tokens > 0 && t > m.tokens.max_tokens) {
              // Real token ids are the data's to truncate (its tokenizer does), not the runtime's.
              if (sample.tokens) {
                throw Error(
                    fmt::format("{}: a document of {} tokens, but module {} reads at most {} (max_tokens); "
                                "truncate the text when preparing the data",
                                sample.tokens->where, t, m.name, m.tokens.max_tokens));
              }
              t = m.tokens.max_tokens;
            }
            if (t > 0) seqs.push_back({x, d, -1, t, {{-1, 0, t}}});
          }
          break;
        case TokenSource::kImage:
          for (size_t i = 0; i < sample.images.size(); ++i) {
            if (piece.item >= 0 && static_cast<int>(i) != piece.item) continue;
            const auto& im = sample.images[i];
            const int64_t t = ImageTokens(m.tokens, im.width_px, im.height_px);
            if (sample.tokens && !sample.tokens->pixel_values_file.empty()) CheckPixelSize(*sample.tokens, i, im, t, m);
            seqs.push_back({x, im.doc, static_cast<int>(i), t, {{-1, 0, t}}});
          }
          break;
        case TokenSource::kVideo:
          if (piece.item >= 0) break;  // image items only
          for (size_t i = 0; i < sample.videos.size(); ++i) {
            const auto& v = sample.videos[i];
            const int64_t t = VideoTokens(m.tokens, v.frames, v.width_px, v.height_px);
            seqs.push_back({x, v.doc, -1, t, {{-1, 0, t}}, static_cast<int>(i)});
          }
          break;
        case TokenSource::kAudio:
          if (piece.item >= 0) break;
          for (size_t i = 0; i < sample.audios.size(); ++i) {
            const auto& a = sample.audios[i];
            const int64_t t = AudioTokens(m.tokens, a.seconds);
            if (t > 0) seqs.push_back({x, a.doc, -1, t, {{-1, 0, t}}, static_cast<int>(i)});
          }
          break;
        case TokenSource::kInputs:
          for (const Part& part : inputs_of(piece, 0, true)) {
            const PackedSequence* from = nullptr;  // the input sequence this part is (or ends)
            int64_t offset = 0;
            for (const auto& s : out.modules[part.source]) {
              if (offset <= part.offset && part.offset < offset + s.tokens) from = &s;
              offset += s.tokens;
            }
            seqs.push_back({x, from->doc, from->image, part.tokens, {part}, from->clip});
          }
          break;
        case TokenSource::kTextAndInputs:
          if (piece.item >= 0) break;  // its documents' text is not in a single image
          if (sample.tokens && !sample.tokens->image_runs.empty()) {
            seqs.push_back(Interleaved(*sample.tokens, x, inputs_of(piece, 0, false), model.modules[mi]));
            break;
          }
          for (int d = 0; d < sample.num_docs(); ++d) {
            PackedSequence s{x, d, -1, 0, inputs_of(piece, d, false)};
            const int64_t text = sample.doc_text_tokens[d];
            if (text > 0) s.parts.push_back({-1, 0, text});
            for (const auto& p : s.parts) s.tokens += p.tokens;
            if (s.tokens > 0) seqs.push_back(std::move(s));
          }
          break;
      }
    }
  }
  return out;
}

int64_t MergeGroup(const Module& source) {
  const TokenRule& r = source.tokens;
  const bool spatial = r.source == TokenSource::kImage || r.source == TokenSource::kVideo;
  return spatial ? r.merge * r.merge : 1;
}

int64_t OutputWidth(const Model& model, int module, int layer) {
  const Layer& l = model.modules[module].layers[layer];
  switch (l.kind) {
    case LayerKind::kMlpProjector:
      return l.out_dim;
    case LayerKind::kConv:
      return l.out_channels;
    case LayerKind::kLmHead:
      return l.vocab;
    default:
      return l.hidden;
  }
}

std::vector<BoundaryTensor> CrossingAfter(const Model& model, const LayerRange& last) {
  const int current = model.FindModule(last.module);
  const bool finished = last.end == static_cast<int>(model.modules[current].layers.size());
  std::vector<BoundaryTensor> out;
  for (int j = 0; j <= current; ++j) {
    bool crosses = j == current && !finished;
    for (size_t i = current + 1; i < model.modules.size() && !crosses; ++i) {
      for (int p : model.modules[i].inputs) crosses = crosses || p == j;
    }
    if (crosses) {
      const int end = j == current ? last.end : static_cast<int>(model.modules[j].layers.size());
      out.push_back({j, OutputWidth(model, j, end - 1)});
    }
  }
  return out;
}

}  // namespace loom::runtime
