// A Module is one component of a multimodal model (vision encoder, projector,
// LLM backbone, diffusion generator): a role, a modality, a frozen flag, its
// layers in execution order, and the rule that says how many tokens it
// processes for a sample. Modules form a DAG through `inputs`.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "loom/spec/layer.h"

namespace loom {

enum class ModuleRole : uint8_t { kEncoder, kProjector, kBackbone, kDecoder, kGenerator };
enum class Modality : uint8_t { kText, kImage, kVideo, kAudio, kMultimodal };

std::string_view ModuleRoleName(ModuleRole role);
std::string_view ModalityName(Modality modality);

// Where a module's tokens come from, per sample.
enum class TokenSource : uint8_t {
  kText,           // the sample's text tokens, one sequence per packed document
  kImage,          // one sequence per image
  kVideo,          // one sequence per video clip
  kAudio,          // one sequence per audio clip
  kInputs,         // the tokens of the input modules, same sequences (projectors)
  kTextAndInputs,  // text plus the input modules' tokens, in the sample's sequences (LLM)
};

std::string_view TokenSourceName(TokenSource source);

// How an image processor cuts one image into several encoder sequences (its
// crops) and how many tokens reach the LLM; cost/image_tiling.h restates
// each family's processor. kNone: one sequence per image (the rule below).
enum class ImageTiling : uint8_t {
  kNone,
  kAnyRes,        // LLaVA-NeXT / OneVision: best grid_pinpoints resolution, tiles + a base image, unpadded
  kDynamicTiles,  // InternVL: the tile grid closest in aspect (<= max_tiles tiles) + a thumbnail
  kSplitGlobal,   // Idefics3: long side to longest_px, tile_px tiles + a global image
  kPixtral,       // Pixtral: downscaled to longest_px, one sequence; a break token per row
  kFixedTiles,    // Mllama: always max_tiles tiles of tile_px in one sequence (padded to 8 tokens)
};
std::string_view ImageTilingName(ImageTiling tiling);

// How an input becomes tokens. Image: the module processes ceil(w/patch_px) *
// ceil(h/patch_px) + extra_tokens (or tokens_per_image) and hands on that
// count / merge^2 (or out_tokens_per_image), less drop_tokens. Video: the image rule per
// ceil(frames / frames_per_token) latent frames. Audio: tokens_per_s * seconds.
// Inputs: upstream tokens / downsample.
struct TokenRule {
  TokenSource source = TokenSource::kText;
  int64_t tokens_per_image = 0;      // fixed count; overrides patch_px when > 0
  int64_t out_tokens_per_image = 0;  // tokens handed downstream per image (pooling); 0: by merge
  int64_t resize_px = 0;             // images/frames are resized to this square side first (0: keep)
  int64_t patch_px = 0;              // pixels per token side (patch x VAE factor for latents)
  int64_t merge = 1;                 // spatial merge after the encoder (pixel shuffle)
  int64_t extra_tokens = 0;          // CLS / register tokens per image
  // Tokens dropped from the start of each image's output before it is handed
  // on (LLaVA's vision_feature_select_strategy "default": transformers'
  // `[:, 1:]`, CLIP's class token, or SigLIP's first patch).
  int64_t drop_tokens = 0;
  // Hidden states of this many layers handed on side by side, each token
  // concat_layers x the width wide (Mllama: its last and 5 intermediate layers).
  int64_t concat_layers = 1;
  int64_t frames_per_token = 1;      // temporal compression for video
  double tokens_per_s = 0;           // audio frame rate after the conv stem
  int64_t downsample = 1;            // projector token reduction
  // Tiling (image source only; YAML `tiling: {kind: anyres, ...}`).
  ImageTiling tiling = ImageTiling::kNone;
  int64_t tile_px = 0;     // one crop's side (the tower's image_size)
  int64_t max_tiles = 0;   // dynamic tiles: at most this many (InternVL 12); fixed tiles: always this many (4)
  int64_t longest_px = 0;  // split-global: the long side resized to this; pixtral: downscaled to at most this
  std::vector<std::pair<int64_t, int64_t>> grid_pinpoints;  // anyres: candidate (height, width) px
  int64_t anyres_max = 0;  // anyres: OneVision's "anyres_max_9" shrink of the feature grid (0: none)
  // Text: tokens a document gives this module at most (a text tower's context:
  // CLIP 77, SigLIP 64; its tokenizer truncates to it); 0: no cap.
  int64_t max_tokens = 0;
};

struct Module {
  std::string name;
  ModuleRole role = ModuleRole::kBackbone;
  Modality modality = Modality::kText;
  bool frozen = false;
  // Cornstarch's bitfield attention mask (data/attention_mask.h; YAML
  // `attention_mask: bitfield`): in each document, text tokens read every
  // earlier token, an input module's tokens read each other both ways.
  // Otherwise (`document`, the default) each document's tokens attend as
  // their layers say (causal or not).
  bool bitfield_attention = false;
  TokenRule tokens;
  std::vector<Layer> layers;
  std::vector<int> inputs;  // indices into Model::modules, all < this module's index
  // Where its weights are in a Hugging Face checkpoint (runtime/hf_weights.h):
  // the prefix before its family's names ("language_model." for LLaVA's LLM,
  // "vision_tower." for its vision tower); empty: the family's
  // own top level ("model." for an LLM, "vision_model." for a vision tower).
  std::string weights_prefix;
};

}  // namespace loom
