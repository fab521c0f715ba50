#include "loom/cost/token_stats.h"

#include <algorithm>
#include <cmath>

#include "loom/cost/image_tiling.h"

namespace loom {

namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Patches along one side: images are resized to the nearest multiple of
// patch x merge, as Qwen2-VL's smart_resize does; for a fixed-size ViT input
// (224 or 384 px at patch 14) this is the conv's 16 or 27.
int64_t GridSide(int64_t px, const TokenRule& r) {
  int64_t unit = r.patch_px * r.merge;
  int64_t units = std::max<int64_t>(1, (px + unit / 2) / unit);
  return units * r.merge;
}

// What a module hands downstream, per document, plus its own sequences.
struct Flow {
  std::vector<double> seqs;
  std::vector<int> seq_doc;      // document of each sequence
  std::vector<double> out_seqs;  // sequences handed to consumers (after merge or pooling)
  std::vector<int> out_doc;
  std::vector<double> out_per_doc;  // tokens passed to consumers, per document
  std::vector<double> in_per_doc;   // scratch: tokens its inputs hand it, per document

  void Clear() {  // keeps the capacity: one Flow serves sample after sample
    seqs.clear();
    seq_doc.clear();
    out_seqs.clear();
    out_doc.clear();
    out_per_doc.clear();
    in_per_doc.clear();
  }
};

// Tokens of one image after the module's spatial merge.
int64_t MergedImageTokens(const TokenRule& r, int64_t w, int64_t h) {
  if (r.resize_px > 0) {
    w = h = r.resize_px;
  }
  if (r.out_tokens_per_image > 0) {
    return r.out_tokens_per_image;
  }
  if (r.tokens_per_image > 0) {
    return std::max<int64_t>(1, r.tokens_per_image / (r.merge * r.merge)) + r.extra_tokens;
  }
  return (GridSide(w, r) / r.merge) * (GridSide(h, r) / r.merge) + r.extra_tokens;
}

// Output tokens of one image after the module's spatial merge, less the dropped ones.
int64_t ImageOutTokens(const TokenRule& r, int64_t w, int64_t h) {
  return std::max<int64_t>(0, MergedImageTokens(r, w, h) - r.drop_tokens);
}
}  // namespace

TokenStats TokenStats::Downscaled(double d) const {
  if (d == 1) {
    return *this;
  }
  TokenStats s = *this;
  s.tokens = tokens / (d * d);
  s.sum_sq = sum_sq / (d * d * d * d);
  s.mask_pairs = mask_pairs / (d * d * d * d);
  s.cross = cross / (d * d);
  return s;
}

int64_t ImageTokens(const TokenRule& r, int64_t w, int64_t h) {
  if (r.tiling != ImageTiling::kNone) {
    const ImageTiles t = TileImage(r, w, h);
    return t.sequences * t.tokens_per_sequence;
  }
  if (r.resize_px > 0) {
    w = h = r.resize_px;
  }
  if (r.tokens_per_image > 0) {
    return r.tokens_per_image + r.extra_tokens;
  }
  return GridSide(w, r) * GridSide(h, r) + r.extra_tokens;
}

int64_t VideoTokens(const TokenRule& r, int64_t frames, int64_t width_px, int64_t height_px) {
  return CeilDiv(frames, r.frames_per_token) * ImageTokens(r, width_px, height_px);
}

int64_t AudioTokens(const TokenRule& r, double seconds) {
  return static_cast<int64_t>(std::ceil(seconds * r.tokens_per_s));
}

namespace {

// CountModuleTokens into `stats`, keeping each module's flow (its sequences
// and per-document outputs). `flows` and `stats` are reused across calls.
void Count(const Model& model, const Sample& sample, std::vector<Flow>& flows, std::vector<TokenStats>& stats) {
  const int docs = std::max(1, sample.num_docs());
  flows.resize(model.modules.size());
  stats.assign(model.modules.size(), TokenStats{});
  for (size_t i = 0; i < model.modules.size(); ++i) {
    const Module& m = model.modules[i];
    const TokenRule& r = m.tokens;
    Flow& f = flows[i];
    f.Clear();
    f.out_per_doc.assign(docs, 0.0);
    auto add_seq = [&](double tokens, int doc, double out) {
      if (tokens > 0) {
        f.seqs.push_back(tokens);
        f.seq_doc.push_back(doc);
        f.out_seqs.push_back(out);
        f.out_doc.push_back(doc);
      }
      f.out_per_doc[doc] += out;
    };
    // Tokens the module's inputs hand it, per document (also the cross-attention context).
    std::vector<double>& in_per_doc = f.in_per_doc;
    in_per_doc.assign(docs, 0.0);
    for (int p : m.inputs) {
      for (int d = 0; d < docs; ++d) {
        in_per_doc[d] += flows[p].out_per_doc[d];
      }
    }
    switch (r.source) {
      case TokenSource::kText:
        for (int d = 0; d < sample.num_docs(); ++d) {
          double t = static_cast<double>(sample.doc_text_tokens[d]);
          if (r.max_tokens > 0) t = std::min(t, static_cast<double>(r.max_tokens));  // the tower's context
          add_seq(t, d, t);
        }
        break;
      case TokenSource::kImage:
        for (const auto& im : sample.images) {
          if (r.tiling != ImageTiling::kNone) {  // several sequences; the consumers' tokens spread over them
            const ImageTiles t = TileImage(r, im.width_px, im.height_px);
            for (int64_t k = 0; k < t.sequences; ++k) {  // whole tokens each, summing to out_tokens exactly
              const int64_t out = (k + 1) * t.out_tokens / t.sequences - k * t.out_tokens / t.sequences;
              add_seq(static_cast<double>(t.tokens_per_sequence), im.doc, static_cast<double>(out));
            }
            continue;
          }
          add_seq(static_cast<double>(ImageTokens(r, im.width_px, im.height_px)), im.doc,
                  static_cast<double>(ImageOutTokens(r, im.width_px, im.height_px)));
        }
        break;
      case TokenSource::kVideo:
        for (const auto& v : sample.videos) {
          const double latent_frames = static_cast<double>(CeilDiv(v.frames, r.frames_per_token));
          add_seq(static_cast<double>(VideoTokens(r, v.frames, v.width_px, v.height_px)), v.doc,
                  latent_frames * static_cast<double>(ImageOutTokens(r, v.width_px, v.height_px)));
        }
        break;
      case TokenSource::kAudio:
        for (const auto& a : sample.audios) {
          const double t = static_cast<double>(AudioTokens(r, a.seconds));
          add_seq(t, a.doc, t);
        }
        break;
      case TokenSource::kInputs:
        for (int p : m.inputs) {
          for (size_t k = 0; k < flows[p].out_seqs.size(); ++k) {
            double t = std::ceil(flows[p].out_seqs[k] / static_cast<double>(r.downsample));
            f.seqs.push_back(t);
            f.seq_doc.push_back(flows[p].out_doc[k]);
          }
        }
        f.out_seqs = f.seqs;
        f.out_doc = f.seq_doc;
        for (int d = 0; d < docs; ++d) {
          f.out_per_doc[d] = std::ceil(in_per_doc[d] / static_cast<double>(r.downsample));
        }
        std::fill(in_per_doc.begin(), in_per_doc.end(), 0.0);  // its own tokens, not context
        break;
      case TokenSource::kTextAndInputs:
        for (int d = 0; d < docs; ++d) {
          double text = d < sample.num_docs() ? static_cast<double>(sample.doc_text_tokens[d]) : 0;
          double t = text + std::ceil(in_per_doc[d] / static_cast<double>(r.downsample));
          add_seq(t, d, t);
        }
        std::fill(in_per_doc.begin(), in_per_doc.end(), 0.0);
        break;
    }
    TokenStats& s = stats[i];
    for (size_t k = 0; k < f.seqs.size(); ++k) {
      s.tokens += f.seqs[k];
      s.sum_sq += f.seqs[k] * f.seqs[k];
      s.sequences += 1;
      s.cross += f.seqs[k] * in_per_doc[f.seq_doc[k]];
    }
    for (int d = 0; d < docs; ++d) {
      s.context_tokens += in_per_doc[d];
    }
  }
}

// ModuleMaskSegments from the flows Count computed.
std::vector<MaskSegment> MaskSegmentsOf(const Model& model, int module, const Sample& sample,
                                        const std::vector<Flow>& flows) {
  const Module& m = model.modules.at(module);
  std::vector<MaskSegment> out;
  if (m.tokens.source == TokenSource::kText || m.tokens.source == TokenSource::kTextAndInputs) {
    const bool inputs = m.tokens.source == TokenSource::kTextAndInputs;
    for (int d = 0; d < sample.num_docs(); ++d) {
      const int64_t text = sample.doc_text_tokens[d];
      out.push_back({text / 2, -1, d});  // embedded: the document's inputs amid its text
      if (inputs) {
        for (size_t i = 0; i < m.inputs.size(); ++i) {
          const double t = std::ceil(flows[m.inputs[i]].out_per_doc[d] / static_cast<double>(m.tokens.downsample));
          out.push_back({static_cast<int64_t>(t), static_cast<int>(i), d});
        }
      }
      out.push_back({text - text / 2, -1, d});
    }
  } else {
    // An encoder's sequences (one per image, clip, ...) each attend within themselves.
    const Flow& f = flows[module];
    for (size_t k = 0; k < f.seqs.size(); ++k) out.push_back({static_cast<int64_t>(f.seqs[k]), 0, static_cast<int>(k)});
  }
  std::vector<MaskSegment> kept;
  for (const auto& s : out) {
    if (s.tokens > 0) kept.push_back(s);
  }
  return kept;
}

// One sample's statistics, bitfield masks' pairs included.
void CountSample(const Model& model, const Sample& sample, std::vector<Flow>& flows, std::vector<TokenStats>& stats) {
  Count(model, sample, flows, stats);
  for (size_t i = 0; i < model.modules.size(); ++i) {
    if (!model.modules[i].bitfield_attention) continue;
    // The layout the runtime's mask follows for a plain sample: each
    // document's inputs amid its text (the embedded layout).
    stats[i].mask_pairs =
        AllowedPairs(MaskSegmentsOf(model, static_cast<int>(i), sample, flows), MaskLayout::kEmbedded);
  }
}

}  // namespace

std::vector<TokenStats> CountModuleTokens(const Model& model, const Sample& sample) {
  std::vector<Flow> flows;
  std::vector<TokenStats> stats;
  CountSample(model, sample, flows, stats);
  return stats;
}

std::vector<MaskSegment> ModuleMaskSegments(const Model& model, int module, const Sample& sample) {
  std::vector<Flow> flows;
  std::vector<TokenStats> stats;
  Count(model, sample, flows, stats);
  return MaskSegmentsOf(model, module, sample, flows);
}

std::vector<TokenStats> CountModuleTokens(const Model& model, const std::vector<Sample>& samples) {
  std::vector<const Sample*> all;
  all.reserve(samples.size());
  for (const auto& s : samples) all.push_back(&s);
  return CountModuleTokens(model, all);
}

std::vector<TokenStats> CountModuleTokens(const Model& model, const std::vector<const Sample*>& samples) {
  std::vector<TokenStats> total(model.modules.size());
  std::vector<Flow> flows;  // reused sample after sample
  std::vector<TokenStats> one;
  for (const Sample* s : samples) {
    CountSample(model, *s, flows, one);
    for (size_t i = 0; i < total.size(); ++i) {
      total[i] += one[i];
    }
  }
  return total;
}

}  // namespace loom
