// Spec-file names of the spec enums, in one place so loader and printers agree.
#include "loom/spec/layer.h"
#include "loom/spec/module.h"

namespace loom {

std::string_view NormKindName(NormKind kind) {
  switch (kind) {
    case NormKind::kNone:
      return "none";
    case NormKind::kLayerNorm:
      return "layer";
    case NormKind::kRmsNorm:
      return "rms";
  }
  return "?";
}

std::string_view ActivationName(Activation activation) {
  switch (activation) {
    case Activation::kDefault:
      return "default";
    case Activation::kSilu:
      return "silu";
    case Activation::kGelu:
      return "gelu";
    case Activation::kGeluTanh:
      return "gelu_tanh";
    case Activation::kQuickGelu:
      return "quick_gelu";
  }
  return "?";
}

std::string_view LayerKindName(LayerKind kind) {
  switch (kind) {
    case LayerKind::kTransformer:
      return "transformer";
    case LayerKind::kConformer:
      return "conformer";
    case LayerKind::kPatchEmbed:
      return "patch_embed";
    case LayerKind::kConv:
      return "conv";
    case LayerKind::kEmbedding:
      return "embedding";
    case LayerKind::kLmHead:
      return "lm_head";
    case LayerKind::kMlpProjector:
      return "mlp_projector";
    case LayerKind::kResnetBlock:
      return "resnet_block";
    case LayerKind::kSpatialTransformer:
      return "spatial_transformer";
  }
  return "?";
}

std::string_view ModuleRoleName(ModuleRole role) {
  switch (role) {
    case ModuleRole::kEncoder:
      return "encoder";
    case ModuleRole::kProjector:
      return "projector";
    case ModuleRole::kBackbone:
      return "backbone";
    case ModuleRole::kDecoder:
      return "decoder";
    case ModuleRole::kGenerator:
      return "generator";
  }
  return "?";
}

std::string_view ModalityName(Modality modality) {
  switch (modality) {
    case Modality::kText:
      return "text";
    case Modality::kImage:
      return "image";
    case Modality::kVideo:
      return "video";
    case Modality::kAudio:
      return "audio";
    case Modality::kMultimodal:
      return "multimodal";
  }
  return "?";
}

std::string_view TokenSourceName(TokenSource source) {
  switch (source) {
    case TokenSource::kText:
      return "text";
    case TokenSource::kImage:
      return "image";
    case TokenSource::kVideo:
      return "video";
    case TokenSource::kAudio:
      return "audio";
    case TokenSource::kInputs:
      return "inputs";
    case TokenSource::kTextAndInputs:
      return "text+inputs";
  }
  return "?";
}

std::string_view ImageTilingName(ImageTiling tiling) {
  switch (tiling) {
    case ImageTiling::kNone:
      return "none";
    case ImageTiling::kAnyRes:
      return "anyres";
    case ImageTiling::kDynamicTiles:
      return "dynamic_tiles";
    case ImageTiling::kSplitGlobal:
      return "split_global";
    case ImageTiling::kPixtral:
      return "pixtral";
    case ImageTiling::kFixedTiles:
      return "fixed_tiles";
  }
  return "?";
}

}  // namespace loom
