#include "loom/cost/image_tiling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace loom {

namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// LLaVA-NeXT (transformers' select_best_resolution, get_anyres_image_grid_shape,
// unpad_image, pack_image_features) and OneVision (its anyres_max shrink):
// the pinpoint that keeps most of the image's pixels (then wastes least), its
// tile grid plus the base image as encoder sequences; the LLM gets the base
// image's n x n features, the tiles' feature grid with the processor's
// padding cut off (one image_newline after each row), shrunk bilinearly when
// it has over 1.1x the pixels of anyres_max tiles.
ImageTiles AnyRes(const TokenRule& r, int64_t w, int64_t h) {
  int64_t best_h = r.grid_pinpoints[0].first, best_w = r.grid_pinpoints[0].second;
  int64_t max_effective = 0, min_waste = std::numeric_limits<int64_t>::max();
  for (const auto& [ph, pw] : r.grid_pinpoints) {
    const double scale = std::min(static_cast<double>(pw) / w, static_cast<double>(ph) / h);
    const int64_t dw = static_cast<int64_t>(w * scale), dh = static_cast<int64_t>(h * scale);  // int(): truncation
    const int64_t effective = std::min(dw * dh, w * h), waste = ph * pw - effective;
    if (effective > max_effective || (effective == max_effective && waste < min_waste)) {
      best_h = ph, best_w = pw, max_effective = effective, min_waste = waste;
    }
  }
  const int64_t n = r.tile_px / r.patch_px, rows_tiles = best_h / r.tile_px, cols_tiles = best_w / r.tile_px;
  ImageTiles t;
  t.sequences = 1 + rows_tiles * cols_tiles;
  t.tokens_per_sequence = n * n + r.extra_tokens;
  int64_t rows = rows_tiles * n, cols = cols_tiles * n;
  // unpad_image: Python's round(x, 7), then int().
  auto round7 = [](double x) { return static_cast<int64_t>(std::nearbyint(x * 1e7) / 1e7); };
  if (static_cast<double>(w) / h > static_cast<double>(cols) / rows) {
    const int64_t new_rows = round7(h * (static_cast<double>(cols) / w));
    rows -= 2 * ((rows - new_rows) / 2);
  } else {
    const int64_t new_cols = round7(w * (static_cast<double>(rows) / h));
    cols -= 2 * ((cols - new_cols) / 2);
  }
  if (r.anyres_max > 0) {
    const double ratio = std::sqrt(static_cast<double>(rows * cols) / static_cast<double>(r.anyres_max * n * n));
    if (ratio > 1.1) {
      rows = static_cast<int64_t>(std::floor(rows / ratio));
      cols = static_cast<int64_t>(std::floor(cols / ratio));
    }
  }
  t.out_tokens = n * n + rows * cols + rows;
  return t;
}

// InternVL (transformers' GotOcr2 get_optimal_tiled_canvas, InternVL's
// dynamic_preprocess): of the grids of at most max_tiles tiles, by tile count,
// the one closest to the image's aspect ratio (an exact tie goes to the larger
// grid when the image has over half its pixels), plus a thumbnail when it has
// several tiles. Each tile: (tile/patch)^2 patches and the class token; the
// pixel shuffle hands on a merge^2-th of the patches (InternVLProcessor's
// 256 per tile), between <img> and </img>.
ImageTiles DynamicTiles(const TokenRule& r, int64_t w, int64_t h) {
  std::vector<std::pair<int64_t, int64_t>> grids;  // (cols, rows)
  for (int64_t c = 1; c <= r.max_tiles; ++c) {
    for (int64_t k = 1; c * k <= r.max_tiles; ++k) grids.push_back({c, k});
  }
  std::stable_sort(grids.begin(), grids.end(),
                   [](const auto& a, const auto& b) { return a.first * a.second < b.first * b.second; });
  const double aspect = static_cast<double>(w) / h;
  double best_diff = std::numeric_limits<double>::infinity();
  std::pair<int64_t, int64_t> best = {1, 1};
  for (const auto& [c, k] : grids) {
    const double diff = std::abs(aspect - static_cast<double>(c) / k);
    if (diff < best_diff) {
      best_diff = diff, best = {c, k};
    } else if (diff == best_diff && static_cast<double>(w * h) > 0.5 * r.tile_px * r.tile_px * c * k) {
      best = {c, k};
    }
  }
  const int64_t tiles = best.first * best.second, n = r.tile_px / r.patch_px;
  ImageTiles t;
  t.sequences = tiles + (tiles > 1 ? 1 : 0);
  t.tokens_per_sequence = n * n + r.extra_tokens;
  t.out_tokens = t.sequences * (n * n / (r.merge * r.merge)) + 2;  // and <img>, </img> around them
  return t;
}

// Idefics3 (its image processor's resize, resize_for_vision_encoder and
// split_images; the processor's _get_num_multimodal_tokens): the long side
// resized to longest_px (the short side kept in proportion, made even), both
// sides rounded up to whole tiles, the tiles plus a global image. Each frame
// hands on (tile/patch / merge)^2 features; the LLM also reads two wrapper
// tokens per tile, a newline per row and three around the global image.
ImageTiles SplitGlobal(const TokenRule& r, int64_t w, int64_t h) {
  const int64_t longest = std::max(w, h), shortest = std::min(w, h);
  int64_t resized_short = static_cast<int64_t>(static_cast<double>(r.longest_px) * shortest / longest);
  if (resized_short % 2 != 0) ++resized_short;
  const int64_t long_tiles = CeilDiv(r.longest_px, r.tile_px), short_tiles = CeilDiv(resized_short, r.tile_px);
  const int64_t rows = w >= h ? short_tiles : long_tiles, cols = w >= h ? long_tiles : short_tiles;
  const int64_t n = r.tile_px / r.patch_px, features = (n / r.merge) * (n / r.merge);
  ImageTiles t;
  t.tokens_per_sequence = n * n + r.extra_tokens;
  if (rows * cols <= 1) {
    t.sequences = 1;
    t.out_tokens = features + 3;
    return t;
  }
  t.sequences = rows * cols + 1;
  t.out_tokens = rows * cols * (features + 2) + rows + features + 3;
  return t;
}

// Pixtral (its image processor's get_resize_output_image_size; the
// processor's [IMG_BREAK] per row, [IMG_END] for the last): downscaled (never
// up) so the long side is at most longest_px, then whole patches.
ImageTiles Pixtral(const TokenRule& r, int64_t w, int64_t h) {
  const double ratio = std::max(static_cast<double>(h) / r.longest_px, static_cast<double>(w) / r.longest_px);
  if (ratio > 1) {
    h = static_cast<int64_t>(std::floor(h / ratio));
    w = static_cast<int64_t>(std::floor(w / ratio));
  }
  const int64_t rows = CeilDiv(std::max<int64_t>(h, 1), r.patch_px),
                cols = CeilDiv(std::max<int64_t>(w, 1), r.patch_px);
  ImageTiles t;
  t.tokens_per_sequence = rows * cols + r.extra_tokens;
  t.out_tokens = rows * (cols + 1);
  return t;
}

// Mllama (MllamaVisionModel.forward): always max_tiles tiles whatever the
// image (padding tiles are computed), each (tile/patch)^2 patches and a class
// token padded to a multiple of 8, in one sequence; downstream (the
// cross-attention context) every tile's unpadded tokens.
ImageTiles FixedTiles(const TokenRule& r, int64_t, int64_t) {
  const int64_t n = r.tile_px / r.patch_px, per_tile = n * n + r.extra_tokens;
  ImageTiles t;
  t.tokens_per_sequence = r.max_tiles * (CeilDiv(per_tile, 8) * 8);
  t.out_tokens = r.max_tiles * per_tile;
  return t;
}

}  // namespace

ImageTiles TileImage(const TokenRule& r, int64_t width_px, int64_t height_px) {
  const int64_t w = std::max<int64_t>(1, width_px), h = std::max<int64_t>(1, height_px);
  switch (r.tiling) {
    case ImageTiling::kAnyRes:
      return AnyRes(r, w, h);
    case ImageTiling::kDynamicTiles:
      return DynamicTiles(r, w, h);
    case ImageTiling::kSplitGlobal:
      return SplitGlobal(r, w, h);
    case ImageTiling::kPixtral:
      return Pixtral(r, w, h);
    case ImageTiling::kFixedTiles:
      return FixedTiles(r, w, h);
    case ImageTiling::kNone:
      break;
  }
  return {};
}

}  // namespace loom
