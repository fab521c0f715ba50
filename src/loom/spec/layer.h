// A Layer is one block of a module with the shapes the cost model needs. Only
// the fields of its kind are meaningful; the loader checks that those are > 0
// and consistent (heads divide hidden, kv_heads divide heads). Plain value type.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace loom {

// Written in spec files by name (LayerKindName); the numbering is not stored.
enum class LayerKind : uint8_t {
  kTransformer,         // attention + MLP (ViT, LLM, DiT with cross_attention)
  kConformer,           // attention + two half-step FFNs + depthwise conv module (audio)
  kPatchEmbed,          // conv with stride = kernel = patch_px, plus learned positions
  kConv,                // generic conv (audio stems): in -> out channels, kernel, 1-3 dims
  kEmbedding,           // token embedding table (+ learned positions)
  kLmHead,              // hidden -> vocab logits; `tied` shares the embedding's weights
  kMlpProjector,        // in_dim -> hidden -> out_dim MLP joining two modules
  kResnetBlock,         // U-Net residual block: two 3x3 convs + time embedding
  kSpatialTransformer,  // U-Net attention block: self + cross attention + GEGLU FFN
};

std::string_view LayerKindName(LayerKind kind);

// How a transformer layer computes beyond its shapes, so that the runtime
// builds exactly the Hugging Face architecture it stands for (transformers'
// modeling files: LlamaDecoderLayer, Qwen2's q/k/v biases, Qwen3's q/k norms,
// CLIP's and SigLIP's encoder layers). The defaults are Loom's own stand-in
// layer (LayerNorm, no biases, no rotary positions); the cost model reads only
// head_dim and the biases (their parameters), everything else is the runtime's.
enum class NormKind : uint8_t { kNone, kLayerNorm, kRmsNorm };
std::string_view NormKindName(NormKind kind);
// The MLP's activation: kDefault is SiLU in a gated MLP, exact GELU otherwise
// (Loom's stand-in); the others as transformers' ACT2FN names them (`silu`,
// `gelu`, `gelu_pytorch_tanh`, `quick_gelu`).
enum class Activation : uint8_t { kDefault, kSilu, kGelu, kGeluTanh, kQuickGelu };
std::string_view ActivationName(Activation activation);
enum class RopeScaling : uint8_t { kNone, kLlama3 };

// Rotary positions (RoPE; runtime/rotary.h): theta 0 means none. Llama 3's
// scaling (`rope_scaling.rope_type: llama3`) with its four parameters.
// `max_positions`: the longest sequence the model was made for (config.json's
// max_position_embeddings); `loom run` refuses a longer packed sequence. 0: no limit.
struct Rope {
  double theta = 0;
  int64_t max_positions = 0;
  RopeScaling scaling = RopeScaling::kNone;
  double factor = 1, low_freq_factor = 1, high_freq_factor = 4;
  int64_t original_max_positions = 8192;
  bool operator==(const Rope&) const = default;
};

struct Layer {
  LayerKind kind = LayerKind::kTransformer;

  // Transformer, conformer, spatial transformer.
  int64_t hidden = 0;      // model width (channels for U-Net blocks)
  int64_t ffn_hidden = 0;  // MLP inner width
  int64_t heads = 0;
  int64_t kv_heads = 0;          // grouped-query attention groups; == heads for MHA
  bool gated_mlp = false;        // SwiGLU / GEGLU: three FFN matrices instead of two
  bool causal = false;           // causal self-attention: half of the s^2 work
  bool cross_attention = false;  // an extra attention block reading the context
  // false: the block attends only to the context (Mllama's cross-attention
  // layers: cross-attention + MLP, no self-attention). REQUIRES cross_attention.
  bool self_attention = true;
  int64_t context_dim = 0;       // width of the cross-attention context (0: = hidden)
  int64_t conv_kernel = 0;       // conformer depthwise kernel
  int64_t head_dim = 0;          // per attention head; 0: hidden / heads (Qwen3 sets it)
  NormKind norm = NormKind::kLayerNorm;  // the attention's and the MLP's pre-norms
  // lm_head: the norm on its input (Llama's model.norm); patch_embed: the norm
  // on its output (CLIP's pre_layrnorm, which normalises the embeddings).
  NormKind final_norm = NormKind::kNone;
  double norm_eps = 1e-5;                 // of either
  bool qkv_bias = false, out_bias = false, mlp_bias = false;
  bool qk_norm = false;  // an RMSNorm over each head of q and k before RoPE (Qwen3)
  Activation activation = Activation::kDefault;
  Rope rope;

  int64_t HeadDim() const { return head_dim > 0 ? head_dim : (heads > 0 ? hidden / heads : 0); }

  // Embedding, LM head, patch embedding.
  int64_t vocab = 0;
  int64_t positions = 0;  // learned position table rows (0: rotary or none)
  bool tied = false;      // LM head shares the embedding matrix: no own parameters

  // Convolutions (patch embed, conv, resnet block).
  int64_t in_channels = 0;
  int64_t out_channels = 0;
  int64_t kernel = 0;
  int64_t dims = 2;  // 1: audio, 2: image, 3: video
  int64_t temporal_patch = 1;
  int64_t stride = 1;           // conv: output positions = module tokens (stride already in tokens)
  bool bias = true;             // patch embedding and MLP projector: their biases (CLIP's patch conv has none)
  int64_t spatial_divisor = 1;  // U-Net level: works on tokens / divisor^2 positions
  int64_t time_embed_dim = 0;   // resnet block: width of the timestep embedding

  // MLP projector: in_dim -> hidden -> out_dim.
  int64_t in_dim = 0;
  int64_t out_dim = 0;

  // Frozen layers have no weight gradients (Cornstarch Eq. 3.2). Inherited from
  // the module unless the spec sets it per layer.
  bool frozen = false;

  bool operator==(const Layer&) const = default;
};

}  // namespace loom
